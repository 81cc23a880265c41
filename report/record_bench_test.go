package report_test

import (
	"testing"
	"time"

	"github.com/shardstock/shardstock/report"
)

// BenchmarkRecorderPurchase is what the sale report adds to every answered
// purchase (in parallel, as the HTTP server calls it).
func BenchmarkRecorderPurchase(b *testing.B) {
	r := report.NewRecorder(report.RecorderConfig{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Purchase("lamp", "sold_out", 300*time.Microsecond)
		}
	})
}
