package shardstock

import "time"

// Controls is what an operator changed about a product after defining it
// (A sale's life): the kill switch, a moved window, the archive. The
// definition itself never changes.
type Controls struct {
	Paused bool
	// WindowSet: StartsAt and EndsAt replace the definition's window (a zero
	// bound is open on that side).
	WindowSet        bool
	StartsAt, EndsAt time.Time
	Archive          ArchiveState
	// Version counts the changes of the product's controls (the catalog's
	// row version): of two reads, the one with the higher Version is newer.
	Version int64
}

// ArchiveState is how far a product's archive got.
type ArchiveState int

// Archive states: a running archive is deleting the product's shard keys;
// a done one deleted them, and the catalog keeps the final totals.
const (
	ArchiveNone ArchiveState = iota
	ArchiveRunning
	ArchiveDone
)

// Apply returns p as c changes it.
func (c Controls) Apply(p Product) Product {
	p.Paused = c.Paused
	p.Archived = c.Archive != ArchiveNone
	if c.WindowSet {
		p.StartsAt, p.EndsAt, p.WindowVersion = c.StartsAt, c.EndsAt, c.Version
	}
	return p
}

// UnixMS is t in unix milliseconds, 0 for the zero time (no bound, in a
// window).
func UnixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// ShardTotals are one shard's counters of a product, kept by the archive.
type ShardTotals struct {
	Shard                        int
	Alloc, Salable, Locked, Sold int64
}
