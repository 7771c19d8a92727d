package btadmin

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// DenyEntry is one entry of a deny list: an info-hash (hex) or a peer_id
// prefix, and the reason clients read after "this torrent is not allowed
// on this tracker" or "your client is not allowed on this tracker".
type DenyEntry struct {
	InfoHash string `json:"info_hash,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Reason   string `json:"reason"`
}

// DenyListsReply answers GET …/deny.
type DenyListsReply struct {
	Torrents []DenyEntry `json:"torrents"`
	Clients  []DenyEntry `json:"clients"`
}

// DenyRequest is the optional body of PUT …/deny/…: the reason.
type DenyRequest struct {
	Reason string `json:"reason"`
}

func (b *Admin) listDenied(c *gin.Context) {
	torrents, clients, err := b.Store.DenyLists(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	reply := DenyListsReply{Torrents: make([]DenyEntry, 0, len(torrents)), Clients: make([]DenyEntry, 0, len(clients))}
	for _, d := range torrents {
		reply.Torrents = append(reply.Torrents, DenyEntry{InfoHash: d.Key, Reason: d.Reason})
	}
	for _, d := range clients {
		reply.Clients = append(reply.Clients, DenyEntry{Prefix: d.Key, Reason: d.Reason})
	}
	c.JSON(http.StatusOK, reply)
}

func denyReason(c *gin.Context) (string, bool) {
	var req DenyRequest
	if c.Request.ContentLength != 0 && !decode(c, &req) {
		return "", false
	}
	return req.Reason, true
}

func (b *Admin) denyTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	reason, ok := denyReason(c)
	if !ok {
		return
	}
	if err := b.Store.DenyTorrent(c.Request.Context(), hash, reason); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "torrent denied", "info_hash", hexHash(hash), "reason", reason)
	c.JSON(http.StatusOK, DenyEntry{InfoHash: hexHash(hash), Reason: reason})
}

func (b *Admin) allowTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	if err := b.Store.AllowTorrent(c.Request.Context(), hash); err != nil {
		_ = c.Error(denyError(err, "no info-hash "+hexHash(hash)+" is denied"))
		return
	}
	logChange(c, "torrent allowed again", "info_hash", hexHash(hash))
	c.JSON(http.StatusOK, DenyEntry{InfoHash: hexHash(hash)})
}

func (b *Admin) denyClient(c *gin.Context) {
	prefix := clientPrefix(c)
	reason, ok := denyReason(c)
	if !ok {
		return
	}
	if err := b.Store.DenyClient(c.Request.Context(), prefix, reason); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "client denied", "prefix", prefix, "reason", reason)
	c.JSON(http.StatusOK, DenyEntry{Prefix: prefix, Reason: reason})
}

func (b *Admin) allowClient(c *gin.Context) {
	prefix := clientPrefix(c)
	if err := b.Store.AllowClient(c.Request.Context(), prefix); err != nil {
		_ = c.Error(denyError(err, "no client prefix "+strconv.Quote(prefix)+" is denied"))
		return
	}
	logChange(c, "client allowed again", "prefix", prefix)
	c.JSON(http.StatusOK, DenyEntry{Prefix: prefix})
}

func denyError(err error, notListed string) error {
	if errors.Is(err, swarm.ErrNotListed) {
		return newAPIError(http.StatusNotFound, "not_denied", notListed)
	}
	return swarmError(err)
}
