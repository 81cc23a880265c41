package order

import (
	"context"
	"sync"
	"testing"
	"time"
)

// emptyBudget grants nothing until open, then everything, counting takes.
type emptyBudget struct {
	mu    sync.Mutex
	open  time.Time
	takes int
}

func (b *emptyBudget) TakeBudget(_ context.Context, _ float64, _, want int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.takes++
	if time.Now().Before(b.open) {
		return 0, nil
	}
	return want, nil
}

// A process short of the cluster's order tokens waits about as long as the
// tokens it wants take to come, instead of asking the budget (a script and
// an fsync on a shard each time) every millisecond.
func TestAdmitWaitsForTheTokensItWants(t *testing.T) {
	b := &emptyBudget{open: time.Now().Add(300 * time.Millisecond)}
	s := NewService(Config{Rate: 10000, Budget: b})
	if err := s.admit(context.Background(), 100); err != nil { // 100 tokens at 10,000/s: 10 ms
		t.Fatal(err)
	}
	if b.takes > 60 {
		t.Fatalf("%d takes of the budget in 300 ms for 100 tokens at 10,000/s; want about 30 (one per 10 ms)", b.takes)
	}
	if b.takes < 10 {
		t.Fatalf("%d takes in 300 ms: it waited longer than the tokens take to come", b.takes)
	}
}
