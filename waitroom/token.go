package waitroom

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
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

// sign issues buyer's token for pos in product's line.
func (s *signer) sign(product, buyer string, pos int64, mode string, now time.Time) (string, error) {
	c := placeClaims{RegisteredClaims: jwt.RegisteredClaims{Issuer: TokenIssuer, Subject: buyer, Audience: jwt.ClaimStrings{TokenAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(tokenTTL))}, Product: product, Pos: pos, Mode: mode}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.secret)
}

var errBadToken = errors.New("the queue token is not valid for this buyer and product")

// verify returns the place raw gives buyer in product's line.
func (s *signer) verify(raw, product, buyer string) (int64, error) {
	var c placeClaims
	if _, err := s.parser.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return s.secret, nil }); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return 0, errors.New("the queue token has expired: join again")
		}
		return 0, errBadToken
	}
	if c.Subject != buyer || c.Product != product || c.Pos < 0 {
		return 0, errBadToken
	}
	return c.Pos, nil
}
