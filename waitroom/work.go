package waitroom

import (
	"crypto/sha256"
	"math/bits"
	"strconv"
)

// A proof of work (hashcash) makes every join cost its client CPU: the
// client finds a nonce such that SHA-256 of WorkInput(product, buyer) +
// nonce begins with difficulty zero bits, about 2^difficulty hashes; the
// coordinator checks it with one. It is bound to the product and the
// buyer, so one solution joins one buyer once.

// MaxDifficulty bounds a line's difficulty (2^28 hashes is seconds of a
// phone's CPU).
const MaxDifficulty = 28

// WorkInput is what a join's proof of work hashes, before the nonce.
func WorkInput(product, buyer string) string {
	return "shardstock-queue:" + product + ":" + buyer + ":"
}

// WorkOK reports whether nonce proves difficulty bits of work for buyer's
// join of product.
func WorkOK(product, buyer, nonce string, difficulty int) bool {
	if difficulty <= 0 {
		return true
	}
	if nonce == "" || len(nonce) > 64 {
		return false
	}
	sum := sha256.Sum256([]byte(WorkInput(product, buyer) + nonce))
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
// client; the sale page solves it in JavaScript).
func Solve(product, buyer string, difficulty int) string {
	in := []byte(WorkInput(product, buyer))
	for i := 0; ; i++ {
		nonce := strconv.Itoa(i)
		sum := sha256.Sum256(append(in, nonce...))
		if leadingZeros(sum[:]) >= difficulty {
			return nonce
		}
	}
}
