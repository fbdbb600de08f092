// Command awslocal is a local stand-in for the AWS price APIs the cost report reads: the
// Price List API's GetProducts and EC2's DescribeSpotPriceHistory (internal/awsfake),
// selling the prices of a price file (the format of --prices). Point the SDK at it with
// AWS_ENDPOINT_URL=http://<listen> and any credentials.
//
// It is test and demo tooling, not part of the webhook.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	file := flag.String("prices", "", "price file to sell (required)")
	flag.Parse()
	if err := run(*listen, *file); err != nil {
		log.Fatal(err)
	}
}

func run(listen, file string) error {
	if file == "" {
		return errors.New("-prices is required")
	}
	table, err := pricing.LoadFile(file)
	if err != nil {
		return err
	}
	prices := awsfake.Prices{OnDemand: map[string]map[string]float64{}, Spot: map[string]map[string]float64{}}
	for _, e := range table.Entries() {
		m := prices.OnDemand
		if e.CapacityType == pricing.Spot {
			m = prices.Spot
		}
		if m[e.Location] == nil {
			m[e.Location] = map[string]float64{}
		}
		m[e.Location][e.InstanceType] = e.USDPerHour
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: awsfake.New(prices), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Printf("awslocal: %d prices on http://%s\n", table.Len(), ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
