package ha

import (
	"testing"
	"time"
)

func TestBackoffDoublesUpToItsCap(t *testing.T) {
	b := Backoff{Min: 50 * time.Millisecond, Max: 300 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{50, 100, 200, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 50*time.Millisecond {
		t.Fatalf("after Reset: %v, want Min", d)
	}
}
