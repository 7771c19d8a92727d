package bittorrent

import "github.com/hoardproject/hoard/internal/http1"

// Request heads are read by the parser hoard's warrior listener shares
// (internal/http1). What is the tracker's own is here: announce and scrape
// have no body.

type (
	requestHead = http1.RequestHead
	headError   = http1.HeadError
)

var (
	errHeadBody    = &headError{Status: 413, Reason: "request bodies are not accepted: announce and scrape are GET requests"}
	errHeadChunked = &headError{Status: 501, Reason: "Transfer-Encoding is not supported: announce and scrape have no body"}
)

// parseRequestHead reads head into h, the lines of proxyHeader ("" keeps
// none) in h.Fields[0], and refuses a request with a body.
func parseRequestHead(head []byte, proxyHeader string, h *requestHead) *headError {
	fields := [1]string{proxyHeader}
	n := 0
	if proxyHeader != "" {
		n = 1
	}
	if err := http1.ParseRequestHead(head, fields[:n], h); err != nil {
		return err
	}
	switch {
	case h.Chunked:
		return errHeadChunked
	case h.ContentLength > 0:
		return errHeadBody
	}
	return nil
}
