package clusterview

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// protobufMagic starts every protobuf-encoded object of the API server: an envelope
// (runtime.Unknown) around the object's own encoding.
var protobufMagic = []byte("k8s\x00")

// maxStreamedPodBytes bounds one pod of a streamed list: etcd stores no object over
// 1.5 MiB by default, and a corrupt length must not allocate gigabytes.
const maxStreamedPodBytes = 16 << 20

// errNotProtobuf is streamedPodList's answer when the API server did not answer in
// protobuf: the caller lists in pages instead.
var errNotProtobuf = errors.New("the pod list did not come as protobuf")

// streamedPodList lists the pods selector selects in one request, at the resource
// version the reflector asks for (its first list: "0", which the API server answers
// from its watch cache instead of paging through etcd), and trims each pod as it is
// read from the response: what it holds is the cached pods and one full pod, never the
// list. It reads the protobuf encoding (a PodList in a runtime.Unknown) field by field;
// errNotProtobuf when the answer is in another encoding.
func streamedPodList(ctx context.Context, client rest.Interface, selector string, opts metav1.ListOptions) (*trimmedPodList, error) {
	opts = metav1.ListOptions{LabelSelector: selector, ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch}
	body, err := client.Get().Resource("pods").VersionedParams(&opts, scheme.ParameterCodec).
		SetHeader("Accept", "application/vnd.kubernetes.protobuf").Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return decodePodStream(bufio.NewReaderSize(body, 64<<10))
}

// decodePodStream reads a protobuf pod list from r, trimming each pod as it is read;
// errNotProtobuf when r does not start as a protobuf object does.
func decodePodStream(r *bufio.Reader) (*trimmedPodList, error) {
	magic := make([]byte, len(protobufMagic))
	if _, err := io.ReadFull(r, magic); err != nil || !bytes.Equal(magic, protobufMagic) {
		return nil, errNotProtobuf
	}
	out := &trimmedPodList{}
	// runtime.Unknown: the PodList is its field 2 (raw); the others are skipped.
	err := eachField(r, -1, func(field uint64, size int) error {
		if field != 2 {
			return skip(r, size)
		}
		// PodList: metadata is field 1, each pod a field 2.
		var buf []byte
		return eachField(r, size, func(field uint64, size int) error {
			if field != 1 && field != 2 {
				return skip(r, size)
			}
			if size > maxStreamedPodBytes {
				return fmt.Errorf("pod %d of the list claims %d bytes, more than any object the API server stores", len(out.Items)+1, size)
			}
			if cap(buf) < size {
				buf = make([]byte, size)
			}
			buf = buf[:size]
			if _, err := io.ReadFull(r, buf); err != nil {
				return fmt.Errorf("read the pod list (%d pods read): %w", len(out.Items), err)
			}
			if field == 1 {
				return out.ListMeta.Unmarshal(buf)
			}
			var pod corev1.Pod
			if err := pod.Unmarshal(buf); err != nil {
				return fmt.Errorf("decode pod %d of the list: %w", len(out.Items)+1, err)
			}
			p, err := trimPod(&pod)
			if err != nil {
				return fmt.Errorf("trim pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			out.Items = append(out.Items, p.(*cachedPod))
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachField calls fn with the number and size of each length-delimited field of the
// protobuf message of size bytes that r is at (-1: until r ends), for fn to read or
// skip exactly size bytes. Fields of other wire types are skipped.
func eachField(r *bufio.Reader, size int, fn func(field uint64, size int) error) error {
	for read := 0; size < 0 || read < size; {
		tag, n, err := uvarint(r)
		if errors.Is(err, io.EOF) && size < 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read a field of the pod list: %w", err)
		}
		read += n
		field, length := tag>>3, 0
		switch wire := tag & 7; wire {
		case 0: // varint
			_, n, err = uvarint(r)
		case 1: // 64 bits
			n, err = 8, skip(r, 8)
		case 5: // 32 bits
			n, err = 4, skip(r, 4)
		case 2: // length-delimited: fn reads it
			var l uint64
			if l, n, err = uvarint(r); err == nil && l > 1<<31 {
				err = fmt.Errorf("a field claims %d bytes", l)
			}
			length = int(l)
		default:
			err = fmt.Errorf("field %d has wire type %d", field, wire)
		}
		if err != nil {
			return fmt.Errorf("read a field of the pod list: %w", err)
		}
		read += n
		if tag&7 != 2 {
			continue
		}
		if err := fn(field, length); err != nil {
			return err
		}
		read += length
	}
	return nil
}

// uvarint reads a varint, and how many bytes it took.
func uvarint(r *bufio.Reader) (uint64, int, error) {
	cr := &countingByteReader{r: r}
	v, err := binary.ReadUvarint(cr)
	if err == io.EOF && cr.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return v, cr.n, err
}

type countingByteReader struct {
	r *bufio.Reader
	n int
}

func (c *countingByteReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// skip discards n bytes of r.
func skip(r *bufio.Reader, n int) error {
	if _, err := r.Discard(n); err != nil {
		return fmt.Errorf("read the pod list: %w", err)
	}
	return nil
}

// restClientOf is the core REST client of client, nil for a client that has none (the
// fake one of unit tests).
func restClientOf(client kubernetes.Interface) rest.Interface {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return nil
	}
	return rc
}
