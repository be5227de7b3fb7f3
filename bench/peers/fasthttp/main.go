// Benchmark peer: Go fasthttp with GOMAXPROCS=1 (the bench pins it to a CPU), answering every request
// with "Hello, World!" as text/plain. Usage: peer-fasthttp PORT
package main

import (
	"os"
	"runtime"

	"github.com/valyala/fasthttp"
)

func main() {
	runtime.GOMAXPROCS(1)
	handler := func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/plain")
		ctx.SetBodyString("Hello, World!")
	}
	server := &fasthttp.Server{Handler: handler, Concurrency: 100000}
	if err := server.ListenAndServe("127.0.0.1:" + os.Args[1]); err != nil {
		panic(err)
	}
}
