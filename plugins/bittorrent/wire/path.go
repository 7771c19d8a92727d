package wire

import (
	"errors"
	"strings"
)

// Endpoint is what a tracker URL asks for.
type Endpoint uint8

// The tracker endpoints.
const (
	EndpointUnknown Endpoint = iota
	EndpointAnnounce
	EndpointScrape
)

// ParsePath recognises the announce and scrape URL shapes:
//
//	/announce              /scrape               (open mode, or ?passkey=)
//	/<passkey>/announce    /<passkey>/scrape     (Ocelot, Gazelle)
//	/announce/<passkey>    /scrape/<passkey>     (aquatic's url_suffix)
//
// It returns EndpointUnknown for anything else, including a malformed
// passkey. path is the decoded path, without the query.
func ParsePath(path string) (ep Endpoint, passkey string) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return EndpointUnknown, ""
	}
	first, second, hasSecond := strings.Cut(rest, "/")
	if ep := endpointName(first); ep != EndpointUnknown {
		switch {
		case !hasSecond, second == "":
			return ep, ""
		case ValidPasskey(second):
			return ep, second
		}
		return EndpointUnknown, ""
	}
	if !hasSecond || !ValidPasskey(first) {
		return EndpointUnknown, ""
	}
	if ep := endpointName(second); ep != EndpointUnknown {
		return ep, first
	}
	return EndpointUnknown, ""
}

func endpointName(s string) Endpoint {
	switch s {
	case "announce":
		return EndpointAnnounce
	case "scrape":
		return EndpointScrape
	}
	return EndpointUnknown
}

// ParseURLData splits a BEP 41 URL-data string ("/<pk>/announce",
// "/announce?passkey=…") into the endpoint and passkey, using the same
// shapes as HTTP. A passkey in both path and query must agree.
func ParseURLData(urlData string) (ep Endpoint, passkey string, err error) {
	path, query, _ := strings.Cut(urlData, "?")
	ep, passkey = ParsePath(path)
	if ep == EndpointUnknown {
		return ep, "", ErrBadURLData
	}
	qp, found, err := QueryValue(query, "passkey")
	if err != nil {
		return ep, "", err
	}
	if !found {
		return ep, passkey, nil
	}
	if !ValidPasskey(qp) {
		return ep, "", ErrBadPasskey
	}
	if passkey != "" && passkey != qp {
		return ep, "", ErrConflictingPasskeys
	}
	return ep, qp, nil
}

// ErrConflictingPasskeys refuses a request naming two different passkeys.
var ErrConflictingPasskeys = errors.New("the URL names two different passkeys")

// ErrBadURLData refuses a UDP request whose BEP 41 URL data is not an
// announce or scrape path.
var ErrBadURLData = errors.New("unknown tracker URL path")
