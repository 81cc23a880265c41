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
	//go:embed purchase.lua
	purchaseSrc string
	//go:embed init.lua
	initSrc string
	//go:embed confirm.lua
	confirmSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed register.lua
	registerSrc string
	//go:embed restore_hold.lua
	restoreHoldSrc string
	//go:embed transfer_out.lua
	transferOutSrc string
	//go:embed transfer_in.lua
	transferInSrc string
	//go:embed window.lua
	windowSrc string
	//go:embed budget.lua
	budgetSrc string
	//go:embed ack.lua
	ackSrc string
)

// Scripts are the stock-path scripts. The zero value is not usable; call
// NewScripts. A Scripts value is immutable and safe for concurrent use.
type Scripts struct {
	// Purchase runs a batch of purchase steps (claim, reserve, give back)
	// for one product on one shard.
	Purchase                *redis.Script
	Init, Confirm, Release  *redis.Script
	Register, RestoreHold   *redis.Script
	TransferOut, TransferIn *redis.Script
	Window, Budget          *redis.Script
	// Ack acknowledges a consumer group's handled stream entries and
	// removes them (messaging.GroupReader).
	Ack *redis.Script
}

// NewScripts wraps the embedded sources.
func NewScripts() *Scripts {
	return &Scripts{
		Purchase:    redis.NewScript(purchaseSrc),
		Window:      redis.NewScript(windowSrc),
		Budget:      redis.NewScript(budgetSrc),
		Init:        redis.NewScript(initSrc),
		Confirm:     redis.NewScript(confirmSrc),
		Release:     redis.NewScript(releaseSrc),
		Register:    redis.NewScript(registerSrc),
		RestoreHold: redis.NewScript(restoreHoldSrc),
		TransferOut: redis.NewScript(transferOutSrc),
		TransferIn:  redis.NewScript(transferInSrc),
		Ack:         redis.NewScript(ackSrc),
	}
}
