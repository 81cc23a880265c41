package waitroom

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"math/bits"
	"strconv"
	"time"
)

// A proof of work (hashcash) makes every join cost its client CPU: the
// client finds a nonce such that SHA-256 of WorkInput(product, buyer,
// challenge) + nonce begins with difficulty zero bits, about
// 2^difficulty hashes; the coordinator checks it with one (two: the
// challenge may be the last one). It is bound to the product and the
// buyer, so one solution joins one buyer once, and to a challenge that the
// room hands out only once it is open and that changes every WorkSlot: no
// work done before the room opens is worth anything (a bot solved
// difficulty 22 in advance and joined at place 1, 0.01 s after opening).

// MaxDifficulty bounds a line's difficulty (2^28 hashes is seconds of a
// phone's CPU).
const MaxDifficulty = 28

// WorkSlot is how long one challenge is handed out; a join's work may be
// for the challenge of this slot or of the last one, so a buyer has at
// least WorkSlot to do it.
const WorkSlot = time.Minute

// WorkInput is what a join's proof of work hashes, before the nonce.
func WorkInput(product, buyer, challenge string) string {
	return "shardstock-queue:" + product + ":" + buyer + ":" + challenge + ":"
}

// challenge is product's challenge for the slot of t, made with secret
// (the room's): nobody without the secret knows it before it is handed
// out.
func challenge(secret []byte, product string, t time.Time) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("shardstock-work:" + product + ":" + strconv.FormatInt(t.Unix()/int64(WorkSlot/time.Second), 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// WorkOK reports whether nonce proves difficulty bits of work for buyer's
// join of product under challenge.
func WorkOK(product, buyer, challenge, nonce string, difficulty int) bool {
	if difficulty <= 0 {
		return true
	}
	if nonce == "" || len(nonce) > 64 || challenge == "" {
		return false
	}
	sum := sha256.Sum256([]byte(WorkInput(product, buyer, challenge) + nonce))
	return leadingZeros(sum[:]) >= difficulty
}

func leadingZeros(b []byte) int {
	n := 0
	for _, x := range b {
		if x != 0 {
			return n + bits.LeadingZeros8(x)
		}
		n += 8
	}
	return n
}

// Solve finds a nonce for WorkOK (the load generator's and the tests'
// client; the sale page solves it in JavaScript, in a Worker).
func Solve(product, buyer, challenge string, difficulty int) string {
	in := []byte(WorkInput(product, buyer, challenge))
	for i := 0; ; i++ {
		nonce := strconv.Itoa(i)
		sum := sha256.Sum256(append(in, nonce...))
		if leadingZeros(sum[:]) >= difficulty {
			return nonce
		}
	}
}
