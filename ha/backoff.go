package ha

import "time"

// Backoff is a capped doubling wait between retries: Min first, then twice
// the last wait, never more than Max. The zero value waits nothing; set
// Min and Max.
type Backoff struct {
	Min, Max time.Duration
	last     time.Duration
}

// Next returns the next wait and remembers it.
func (b *Backoff) Next() time.Duration {
	b.last = min(max(2*b.last, b.Min), b.Max)
	return b.last
}

// Reset starts again from Min (after a success).
func (b *Backoff) Reset() { b.last = 0 }
