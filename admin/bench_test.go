package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/reactions"
)

// BenchmarkAdminRequest is one admin request over loopback TCP, as `nats
// req` or `syncnode checkpoints` make it: the target is p50 ≤ 1 ms.
func BenchmarkAdminRequest(b *testing.B) {
	n := nodetest.Start(b, nil)
	ctx := context.Background()
	if _, err := n.Store.PartitionTouch(ctx, "acme", time.Now().UnixMilli()); err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(n.NATS.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	api := admin.NewClient(nc, 10*time.Second)
	rx := reactions.NewAdminClient(api)
	acme := "acme"
	for _, bc := range []struct {
		name string
		call func() error
	}{
		{"checkpoints.list", func() error { _, err := api.Checkpoints(ctx, admin.CheckpointsRequest{Partition: &acme}); return err }},
		{"partitions.info", func() error { _, err := api.PartitionInfo(ctx, admin.PartitionRequest{Partition: acme}); return err }},
		{"node.info", func() error { _, err := api.NodeInfo(ctx); return err }},
		{"reactions.list", func() error { _, err := rx.List(ctx, reactions.ListRequest{Partition: &acme}); return err }},
		{"reactions.stats", func() error { _, err := rx.Stats(ctx); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
