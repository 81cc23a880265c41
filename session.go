package shardstock

import (
	"time"
	"unicode/utf8"
)

// Session groups products under one sale window.
type Session struct {
	ID       string    `json:"id"`
	Title    string    `json:"title"`
	StartsAt time.Time `json:"starts_at"`
	EndsAt   time.Time `json:"ends_at"`
	Products []string  `json:"products"`
}

// MaxSessionProducts bounds a session's product list.
const MaxSessionProducts = 100

// Validate reports the first problem with s as an ErrInvalid.
func (s *Session) Validate() error {
	switch {
	case !ValidID(s.ID):
		return Invalid("session id must be 1-64 characters of [A-Za-z0-9_-]")
	case s.StartsAt.IsZero() || s.EndsAt.IsZero() || !s.EndsAt.After(s.StartsAt):
		return Invalid("starts_at and ends_at are required, ends_at after starts_at")
	case utf8.RuneCountInString(s.Title) > MaxTitleLen:
		return Invalid("title must be at most 200 characters")
	case len(s.Products) == 0 || len(s.Products) > MaxSessionProducts:
		return Invalid("products must list 1 to 100 product ids")
	}
	for _, p := range s.Products {
		if !ValidID(p) {
			return Invalid("product ids must be 1-64 characters of [A-Za-z0-9_-]")
		}
	}
	return nil
}
