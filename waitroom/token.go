package waitroom

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/shardstock/shardstock"
)

// A place token is a JWT (HS256) for TokenAudience: the product, the buyer
// (its subject), the place and the line's mode, signed with the room's
// secret. Any coordinator (and the edge) verifies it with the secret alone,
// and it is good only for the buyer it names: shared or sold, it admits
// nobody else.
const (
	TokenIssuer   = "shardstock"
	TokenAudience = "shardstock-queue"
	tokenTTL      = 24 * time.Hour
)

// placeClaims are a place token's claims.
type placeClaims struct {
	jwt.RegisteredClaims
	Product string `json:"pid"`
	Pos     int64  `json:"pos"`  // 0: in a draw's lobby, placed at the start
	Mode    string `json:"mode"` // the line's mode when it was issued
	Joined  int64  `json:"jat"`  // when the buyer joined, Unix ms: no turn comes before it
	Version int64  `json:"ver"`  // the line's version the token was issued on
}

// ticket is what a verified token says.
type ticket struct {
	shardstock.QueuePlace
	Mode string
}

// signer signs and verifies place tokens.
type signer struct {
	secret []byte
	parser *jwt.Parser
}

func newSigner(secret []byte, now func() time.Time) *signer {
	return &signer{secret: secret, parser: jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithIssuer(TokenIssuer), jwt.WithAudience(TokenAudience),
		jwt.WithLeeway(5*time.Second), jwt.WithTimeFunc(now))}
}

// sign issues buyer's token for their place in product's line.
func (s *signer) sign(product, buyer string, t ticket, now time.Time) (string, error) {
	c := placeClaims{RegisteredClaims: jwt.RegisteredClaims{Issuer: TokenIssuer, Subject: buyer, Audience: jwt.ClaimStrings{TokenAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(tokenTTL))}, Product: product, Pos: t.Position, Mode: t.Mode,
		Joined: t.JoinedAt.UnixMilli(), Version: t.LineVersion}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.secret)
}

var errBadToken = errors.New("the queue token is not valid for this buyer and product")

// verify returns the place raw gives buyer in product's line.
func (s *signer) verify(raw, product, buyer string) (ticket, error) {
	var c placeClaims
	if _, err := s.parser.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return s.secret, nil }); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return ticket{}, errors.New("the queue token has expired: join again")
		}
		return ticket{}, errBadToken
	}
	if c.Subject != buyer || c.Product != product || c.Pos < 0 {
		return ticket{}, errBadToken
	}
	return ticket{QueuePlace: shardstock.QueuePlace{Position: c.Pos, JoinedAt: time.UnixMilli(c.Joined).UTC(), LineVersion: c.Version}, Mode: c.Mode}, nil
}
