package inventory

import (
	"context"
	"maps"
	"time"

	"github.com/shardstock/shardstock"
)

// Every coordinator reads the controls every ControlsEvery (RunControls)
// and drops its cached products when they changed, so a pause or a window
// change is obeyed everywhere within a second, with no Redis call per
// purchase: the purchase path checks the cached product (Product.Open).

// Controls are the operators' changes to product id, as last read.
func (s *Catalog) Controls(id string) (shardstock.Controls, bool) {
	m := s.controls.Load()
	if m == nil {
		return shardstock.Controls{}, false
	}
	c, ok := (*m)[id]
	return c, ok
}

// RefreshControls reads the controls and the sessions from the catalog;
// when they changed, every cached product is read again on its next use.
// One runs at a time: a refresh whose read began before an operator's
// change stored what it read after the change's own refresh, and the
// change was undone here until the next (an archive right after "end"
// answered 409 "has not ended": TestArchiveFreesRedis, 1 run in about 20).
func (s *Catalog) RefreshControls(ctx context.Context) error {
	s.refresh.Lock()
	defer s.refresh.Unlock()
	sessions, err := s.cfg.Sessions.Sessions(ctx)
	if err != nil {
		return err
	}
	windows := sessionWindows(sessions)
	changed := false
	if old := s.sessions.Load(); old == nil || !maps.Equal(*old, windows) {
		s.sessions.Store(&windows)
		changed = true
	}
	if s.cfg.Controls != nil {
		m, err := s.cfg.Controls.ProductControls(ctx)
		if err != nil {
			return err
		}
		if old := s.controls.Load(); old == nil || !maps.Equal(*old, m) {
			s.controls.Store(&m)
			changed = true
		}
	}
	if changed {
		s.gen.Add(1)
	}
	return nil
}

// sessionWindow is the window a product without one of its own sells in:
// from the earliest start to the latest end of the sessions that list it.
type sessionWindow struct{ StartsAt, EndsAt time.Time }

func sessionWindows(sessions []shardstock.Session) map[string]sessionWindow {
	out := map[string]sessionWindow{}
	for _, ss := range sessions {
		for _, id := range ss.Products {
			w, ok := out[id]
			if !ok || ss.StartsAt.Before(w.StartsAt) {
				w.StartsAt = ss.StartsAt
			}
			if !ok || ss.EndsAt.After(w.EndsAt) {
				w.EndsAt = ss.EndsAt
			}
			out[id] = w
		}
	}
	return out
}

func (s *Catalog) sessionWindowOf(id string) (sessionWindow, bool) {
	m := s.sessions.Load()
	if m == nil {
		return sessionWindow{}, false
	}
	w, ok := (*m)[id]
	return w, ok
}

// RunControls refreshes the controls every `every` until ctx is done.
func (s *Catalog) RunControls(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		if err := s.RefreshControls(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				s.cfg.Logger.Warn("could not read the product controls; keeping the last ones", "err", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
