package sqlstore

import "context"

// WriterPragma reads a PRAGMA on the store's writer (tests only).
func WriterPragma(s *Store, name string) (string, error) {
	var v string
	err := s.db.QueryRowContext(context.Background(), "PRAGMA "+name).Scan(&v)
	return v, err
}
