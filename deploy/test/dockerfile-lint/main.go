// Command dockerfile-lint checks Dockerfiles with BuildKit's own lint rules (the checks
// behind `docker build --check`) without a Docker engine or registry access: base-image
// lookups are answered offline with a minimal config.
//
//	go run . path/to/Dockerfile
//
// Exit status 1 when there is a warning or the Dockerfile does not parse.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/containerd/platforms"
	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerui"
	digest "github.com/opencontainers/go-digest"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
)

// offline answers every image lookup with a minimal config for the asked platform.
type offline struct{}

func (offline) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	p := platforms.DefaultSpec()
	if opt.ImageOpt != nil && opt.ImageOpt.Platform != nil {
		p = *opt.ImageOpt.Platform
	}
	cfg, err := json.Marshal(ocispecs.Image{Platform: p, Config: ocispecs.ImageConfig{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}})
	if err != nil {
		return "", "", nil, fmt.Errorf("encoding image config: %w", err)
	}
	return ref, digest.FromBytes(cfg), cfg, nil
}

func lint(path string) (int, error) {
	dt, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	src := llb.Scratch()
	def, err := src.Marshal(ctx)
	if err != nil {
		return 0, fmt.Errorf("building source map: %w", err)
	}
	sm := llb.NewSourceMap(&src, path, "Dockerfile", dt)
	sm.Definition = def
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		Config: dockerui.Config{
			BuildPlatforms:  []ocispecs.Platform{platforms.DefaultSpec()},
			TargetPlatforms: []ocispecs.Platform{platforms.MustParse("linux/amd64"), platforms.MustParse("linux/arm64")},
		},
		SourceMap:    sm,
		MetaResolver: offline{},
	})
	if err != nil {
		return 0, err
	}
	for _, w := range res.Warnings {
		line := int32(0)
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = w.Location.Ranges[0].Start.Line
		}
		fmt.Printf("%s:%d: %s: %s (%s)\n", path, line, w.RuleName, w.Detail, w.URL)
	}
	if res.Error != nil {
		return 0, fmt.Errorf("%s: %s", path, res.Error.Message)
	}
	return len(res.Warnings), nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dockerfile-lint PATH")
		os.Exit(2)
	}
	n, err := lint(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "dockerfile-lint:", err)
		os.Exit(1)
	}
	if n > 0 {
		os.Exit(1)
	}
	fmt.Printf("%s: no lint warnings\n", os.Args[1])
}
