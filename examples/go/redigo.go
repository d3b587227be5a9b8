// docs/any-client.md, "Go: redigo": a purchase, the reply shapes and a fenced lock.
// Run: GO111MODULE=off GOPATH=/usr/share/gocode go run redigo.go PORT [cluster]
// (Debian's golang-go and golang-github-gomodule-redigo-dev; tests/any_client.rs runs both.)
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// do sends one command whose key is args[0]. redigo has no cluster client: against a
// cluster, a MOVED reply names the master that serves the key, and the command goes there.
func do(addr *string, cmd string, args ...interface{}) (interface{}, error) {
	for hops := 0; ; hops++ {
		// A read timeout longer than any LOCK.ACQUIRE ... WAIT: a caller that gives up first is
		// told "failed" while the server may still grant it the lock.
		conn, err := redis.Dial("tcp", *addr, redis.DialReadTimeout(5*time.Second))
		if err != nil {
			return nil, err
		}
		reply, err := conn.Do(cmd, args...)
		conn.Close()
		if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "MOVED ") && hops < 3 {
			*addr = strings.Fields(string(e))[2]
			continue
		}
		return reply, err
	}
}

func id() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	addr := "127.0.0.1:" + os.Args[1]
	mode := "single"
	if len(os.Args) > 2 {
		mode = os.Args[2]
	}
	sale, lock := "{go-redigo}:sale", "{go-redigo}:lock"
	_, err := do(&addr, "SECKILL.INIT", sale, 10, "LIMIT", 2, "REPLACE")
	must(err)

	// Always an attempt id: a resend or a retry is answered from the record, never run twice.
	attempt := id()
	left, err := redis.Int64(do(&addr, "SECKILL.TRY", sale, "alice", 1, "ID", attempt))
	must(err)
	again, err := redis.Int64(do(&addr, "SECKILL.TRY", sale, "alice", 1, "ID", attempt))
	must(err)
	owned, err := redis.Int64(do(&addr, "SECKILL.BOUGHT", sale, "alice"))
	must(err)
	if again != left || owned != 1 {
		log.Fatalf("retry answered %d (first %d), alice owns %d", again, left, owned)
	}

	// [cursor, [user, qty, state, ...]]; redigo speaks RESP2, where INFO is [name, value, ...].
	page, err := redis.Values(do(&addr, "SECKILL.BUYERS", sale, 0))
	must(err)
	rows, err := redis.Values(page[1], nil)
	must(err)
	user, _ := redis.String(rows[0], nil)
	info, err := redis.Values(do(&addr, "SECKILL.INFO", sale))
	must(err)
	sold := int64(-1)
	for i := 0; i+1 < len(info); i += 2 { // some values are nil: no Int64Map
		if name, _ := redis.String(info[i], nil); name == "sold" {
			sold, _ = redis.Int64(info[i+1], nil)
		}
	}
	if user != "alice" || sold != 1 {
		log.Fatalf("buyers %q, sold %d", rows, sold)
	}

	// Fences are int64: exact in Go at any size, below 2^53 for every other language.
	token := id()
	fence, err := redis.Int64(do(&addr, "LOCK.ACQUIRE", lock, token, 10000, "WAIT", 1000))
	must(err)
	released, err := redis.Int64(do(&addr, "LOCK.RELEASE", lock, token))
	must(err)
	next, err := redis.Int64(do(&addr, "LOCK.ACQUIRE", lock, token, 10000))
	must(err)
	if released != 1 || next <= fence || fence >= 1<<53 {
		log.Fatalf("released %d, fences %d then %d", released, fence, next)
	}
	_, err = do(&addr, "LOCK.RELEASE", lock, token)
	must(err)
	fmt.Printf("redigo %s: bought, %d left; fences %d < %d\n", mode, left, fence, next)
}
