// Package lua holds the Redis scripts of the stock path, embedded from the
// .lua files beside this one. Each script takes keys only through KEYS and
// values only through ARGV; script text is never built from input. The
// scripts are wrapped once in redis.NewScript, so Run sends EVALSHA and falls
// back to EVAL when a shard answers NOSCRIPT (after a restart, say).
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// purchaseSrc defines the claim and reserve functions that the
	// purchase scripts call; it is prepended to each of them.
	//go:embed purchase.lua
	purchaseSrc string
	//go:embed claim_reserve.lua
	claimReserveSrc string
	//go:embed init.lua
	initSrc string
	//go:embed reserve.lua
	reserveSrc string
	//go:embed confirm.lua
	confirmSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed claim.lua
	claimSrc string
	//go:embed unclaim.lua
	unclaimSrc string
	//go:embed transfer_out.lua
	transferOutSrc string
	//go:embed transfer_in.lua
	transferInSrc string
)

// Scripts are the stock-path scripts. The zero value is not usable; call
// NewScripts. A Scripts value is immutable and safe for concurrent use.
type Scripts struct {
	Init, Reserve, Confirm, Release, Claim, Unclaim *redis.Script
	// ClaimReserve is Claim and, when the claim is granted, Reserve on the
	// same shard in one call.
	ClaimReserve            *redis.Script
	TransferOut, TransferIn *redis.Script
}

// source returns the text of the script named like its file ("reserve"
// for reserve.lua), as it is sent to Redis: the purchase scripts with the
// functions they call (deploy/bench.sh composes reserve the same way).
func source(name string) (string, bool) {
	src, ok := map[string]string{
		"init": initSrc, "confirm": confirmSrc, "release": releaseSrc, "unclaim": unclaimSrc,
		"transfer_out": transferOutSrc, "transfer_in": transferInSrc,
		"reserve":       purchaseSrc + reserveSrc,
		"claim":         purchaseSrc + claimSrc,
		"claim_reserve": purchaseSrc + claimReserveSrc,
	}[name]
	return src, ok
}

// NewScripts wraps the embedded sources.
func NewScripts() *Scripts {
	script := func(name string) *redis.Script {
		src, _ := source(name)
		return redis.NewScript(src)
	}
	return &Scripts{
		Init:         script("init"),
		Reserve:      script("reserve"),
		Confirm:      script("confirm"),
		Release:      script("release"),
		Claim:        script("claim"),
		Unclaim:      script("unclaim"),
		ClaimReserve: script("claim_reserve"),
		TransferOut:  script("transfer_out"),
		TransferIn:   script("transfer_in"),
	}
}
