// Package wire is the BitTorrent tracker protocol with no I/O and no store:
// an append-style bencode writer, HTTP announce/scrape query parsing and
// response rendering (BEP 3, 7, 23, 48), UDP tracker packets (BEP 15) with
// URL-data options (BEP 41), and stateless UDP connection IDs.
//
// Everything here is allocation-light on purpose: parsers fill a
// caller-owned struct and writers append to a caller-owned buffer, so the
// listeners can reuse both across requests. Every error a parser returns is
// safe to show the client verbatim.
package wire
