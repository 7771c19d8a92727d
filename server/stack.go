package server

import (
	"context"
	"net"
	"net/http"
)

// stackReserve is how much stack a connection's first request is given at
// the top of its goroutine: a warrior call goes down net/http, gin, the
// middleware, the handler, the engine and go-redis (whose pipeline the
// batch's leader writes and reads on its own goroutine), 40-60 frames deep.
const stackReserve = 16 << 10

// Growing the stack of a connection's goroutine early. net/http serves
// each connection on a new goroutine whose stack starts small (8 KB) and
// is grown by copying it, twice its size each time, wherever a call finds
// it full: deep in the request, where the copy must adjust every frame.
// Seesaw opens a connection per request, so every request paid that (a
// tenth of hoard's CPU samples under that load, docs/warrior-path.md).
// Grown at the top of the connection's first request, the copy holds a
// handful of frames. Later requests on a kept-alive connection find the
// room there and skip it: clearing the reserve costs about a microsecond.

// connStack is a connection's note that its goroutine's stack was grown.
// Only the connection's goroutine reads and writes it (http.Server serves
// a connection's requests one at a time, on that goroutine).
type connStack struct{ grown bool }

type connStackKey struct{}

// noteConnStack is the http.Server's ConnContext: a note per connection.
func noteConnStack(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connStackKey{}, &connStack{})
}

// withGrownStack serves h after growing the goroutine's stack by
// stackReserve on each connection's first request.
func withGrownStack(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if note, ok := r.Context().Value(connStackKey{}).(*connStack); ok && !note.grown {
			note.grown = true
			growStack(len(r.URL.Path))
		}
		h.ServeHTTP(w, r)
	})
}

// growStack needs a stackReserve frame, so calling it makes the runtime
// grow the stack to fit one; the frame is gone when it returns, the room
// stays. The frame is used (i: any number the compiler cannot know), or
// the compiler would drop it.
//
//go:noinline
func growStack(i int) byte {
	var reserve [stackReserve]byte
	reserve[uint(i)%stackReserve] = byte(i)
	return reserve[uint(i*7)%stackReserve]
}
