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
	TransferOut, TransferIn                         *redis.Script
}

// NewScripts wraps the embedded sources.
func NewScripts() *Scripts {
	return &Scripts{
		Init:    redis.NewScript(initSrc),
		Reserve: redis.NewScript(reserveSrc),
		Confirm: redis.NewScript(confirmSrc),
		Release: redis.NewScript(releaseSrc),
		Claim:   redis.NewScript(claimSrc),
		Unclaim: redis.NewScript(unclaimSrc),

		TransferOut: redis.NewScript(transferOutSrc),
		TransferIn:  redis.NewScript(transferInSrc),
	}
}
