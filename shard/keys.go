package shard

import "strings"

// productKeys are the Redis keys of one product on a shard. The product id
// must have passed shardstock.ValidID before it gets here.
type productKeys struct {
	stock, holds, claims, outbox, transfers string
}

func keysFor(product string) productKeys {
	tag := "ss:{p:" + product + "}:"
	return productKeys{
		stock:     tag + "stock",
		holds:     tag + "holds",
		claims:    tag + "claims",
		outbox:    tag + "outbox",
		transfers: tag + "transfers",
	}
}

// productsKey is the per-shard set of initialised product ids.
const productsKey = "ss:products"

// OutboxKey is the outbox stream of product on every shard.
func OutboxKey(product string) string { return keysFor(product).outbox }

// OutboxProduct is the product of an outbox stream key ("" for another key).
func OutboxProduct(key string) string {
	p, ok := strings.CutPrefix(key, "ss:{p:")
	if p, ok2 := strings.CutSuffix(p, "}:outbox"); ok && ok2 {
		return p
	}
	return ""
}

// ProductsKey is the per-shard set of initialised product ids.
const ProductsKey = productsKey

// SettleKey is the per-shard stream of settlements (pay results) for the
// holds on that shard, in Redis Streams mode. DeadSettleKey keeps, on the
// same shard, the entries the order table did not bear out (fields body,
// reason and entry, the refused entry's id).
const (
	SettleKey     = "ss:settle"
	DeadSettleKey = "ss:settle:dead"
)

// PaymentsKey is the per-shard stream of payment results in Redis Streams
// mode: the payment centre appends each result (fields body and signature)
// to any one shard's; the order service reads every shard's.
// DeadPaymentsKey keeps, on the same shard, the results it refused (with
// a field reason).
const (
	PaymentsKey     = "ss:payments"
	DeadPaymentsKey = "ss:payments:dead"
)
