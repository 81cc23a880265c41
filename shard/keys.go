package shard

// productKeys are the Redis keys of one product on a shard. The product id
// must have passed shardstock.ValidID before it gets here.
type productKeys struct {
	stock, holds, buyers, claims, outbox string
}

func keysFor(product string) productKeys {
	tag := "ss:{p:" + product + "}:"
	return productKeys{
		stock:  tag + "stock",
		holds:  tag + "holds",
		buyers: tag + "buyers",
		claims: tag + "claims",
		outbox: tag + "outbox",
	}
}

// productsKey is the per-shard set of initialised product ids.
const productsKey = "ss:products"
