// Command httpceiling is the HTTP ceiling of make bench: the cheapest Go
// net/http server answering a small JSON body, so shardstock's purchase
// path can be measured as a fraction of what this machine serves at all.
//
//	httpceiling [-addr 127.0.0.1:18090]
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "listen address")
	flag.Parse()
	body := []byte(`{"status":"reserved","order_id":"01M8N922280DJ10N0KNRF14MF8","shard":1}`)
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
