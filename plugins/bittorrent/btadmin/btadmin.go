// Package btadmin is the BitTorrent plugin's own HTTP API: the admin calls
// (torrents, passkeys, the client whitelist, stats, top, the outbox, the
// reaper, scores, the unique-IP metrics) and the tracker page's data. The
// plugin serves it through the plugin contract (plugins.Plugin's
// HandleRequest, see api.go): the host authenticates the caller, records
// the actor and the changes, and forwards /api/v1/plugins/bittorrent/…
// (and the older /api/v1/bittorrent/…) here; it links none of this code.
package btadmin

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The BitTorrent admin calls, for the site that owns torrents, users and
// the client whitelist (a Gazelle-style site keeps its database as the
// truth and pushes changes here), below /api/v1/plugins/bittorrent (or
// /api/v1/bittorrent):
//
//	PUT    /torrents/:infohash   {"id":"123"}   register (or re-id) a torrent (also uploader, created, value)
//	DELETE /torrents/:infohash  [{"reason":"Trumped"}]  unregister it (404 if not registered); with a
//	                                            reason, its announces answer "torrent deleted: <reason>"
//	                                            for deleted_reason_ttl; ?purge=true also deletes its
//	                                            records now (registered or not; 409 while it has peers)
//	GET    /torrents/:infohash                  its record (404 if none)
//	PUT    /users/:passkey       {"user_id":"7"} map a passkey to a user
//	DELETE /users/:passkey                      forget a passkey
//	GET    /users/by-id/:user_id                the user's sets and totals (raw and credited)
//	GET    /clients                             the client whitelist
//	PUT    /clients/*prefix      {"name":"…"}   whitelist a peer_id prefix
//	DELETE /clients/*prefix                     take it off (404 if not listed)
//	GET    /stats                               the global counters
//	GET    /top?by=seeders&n=10                 torrents ranked by seeders, leechers or snatches
//	GET    /torrents/:infohash/trackers         the external trackers scoring announces to
//	PUT    /torrents/:infohash/trackers         {"trackers":[{"url":"udp://h:p/announce","max_peers":200}]} replace them
//	DELETE /torrents/:infohash/trackers         clear them
//	GET    /torrents/:infohash/score            its score, sources (own swarm, each tracker) and history
//	GET    /scores/top?n=10                     the torrents with the highest scores
//	GET    /deny                                the deny lists (both modes)
//	PUT    /deny/torrents/:infohash {"reason":"…"}  deny an info-hash; DELETE allows it again
//	PUT    /deny/clients/*prefix    {"reason":"…"}  deny a peer_id prefix; DELETE allows it again
//
// PUT …/torrents/:infohash takes "trackers" too: the list is checked
// before anything is written and replaces the torrent's list; absent, the
// list is left as it is.
//
// Info-hashes are 40 hex characters; torrent ids, user ids and passkeys
// are 1-64 characters of A-Z a-z 0-9 _ -. A client prefix is 1-20 bytes of
// a peer_id, percent-encoded in the path (url.PathEscape), so prefixes
// like "-TR3" or "M7-" pass as they are and any other byte, "/" included,
// passes escaped.
//
// Changes are written through the plugin's own swarm.Store, the one its
// listeners announce through: it drops its cached copy of a passkey or
// of the whitelist at once and tells the other frontends with a Redis
// hint (btstore.CacheHintChannel), so a change reaches the next announce
// everywhere; the cache's TTL (swarm.Config.CacheTTL, 10s) stays the
// backstop for a hint lost while a frontend was away.
// Passkeys are secrets: the log and the replies show only their first
// characters.

// Admin serves the BitTorrent admin calls. A nil Store answers every call
// with 503, as a nil Outbox answers the outbox calls (outbox.go).
type Admin struct {
	Store  *swarm.Store
	Outbox *outbox.Outbox
	// Reaper serves the unseeded reaper's calls (reaper.go); nil when the
	// reaper is off, and they answer 503.
	Reaper *reaper.Reaper
	// Scorer reads and writes scoring's keys (external trackers, scores);
	// nil answers those calls with 503.
	Scorer *scoring.Scorer
	// ScoreOnRegister puts a newly registered torrent into scoring at
	// once (at 1.0, not yet processed), so its score shows before the
	// scoring job's next run; set when scoring is on.
	ScoreOnRegister bool
}

// Defaults and bounds of GET …/top.
const (
	DefaultTopCount = 10
	MaxTopCount     = 1000
)

// register adds the admin calls to g, the root of the plugin's API.
func (b *Admin) register(g *gin.RouterGroup) {
	bt := g.Group("", requirePart(func() bool { return b.Store != nil },
		"bittorrent_off", "this hoard has no BitTorrent swarm store (btadmin.Admin.Store is not set)"))
	bt.PUT("/torrents/:infohash", b.registerTorrent)
	bt.DELETE("/torrents/:infohash", b.unregisterTorrent)
	bt.GET("/torrents/:infohash", b.showTorrent)
	bt.PUT("/users/:passkey", b.addUser)
	bt.DELETE("/users/:passkey", b.removeUser)
	bt.GET("/users/by-id/:user_id", b.showUser)
	bt.GET("/clients", b.listClients)
	bt.PUT("/clients/*prefix", b.addClient)
	bt.DELETE("/clients/*prefix", b.removeClient)
	bt.GET("/stats", b.stats)
	bt.GET("/top", b.top)
	bt.GET("/deny", b.listDenied)
	bt.PUT("/deny/torrents/:infohash", b.denyTorrent)
	bt.DELETE("/deny/torrents/:infohash", b.allowTorrent)
	bt.PUT("/deny/clients/*prefix", b.denyClient)
	bt.DELETE("/deny/clients/*prefix", b.allowClient)
	b.registerOutbox(g)
	b.registerReaper(bt)
	b.registerCredit(bt)
	sc := bt.Group("", requirePart(func() bool { return b.Scorer != nil },
		"scoring_off", "this hoard has no scoring store (btadmin.Admin.Scorer is not set)"))
	sc.GET("/torrents/:infohash/trackers", b.showTrackers)
	sc.PUT("/torrents/:infohash/trackers", b.setTrackers)
	sc.DELETE("/torrents/:infohash/trackers", b.clearTrackers)
	sc.GET("/torrents/:infohash/score", b.showScore)
	sc.GET("/scores/top", b.topScores)
}

// swarmError turns the store's argument errors into 400 and 404 replies
// with the store's own explanation; anything else stays internal.
func swarmError(err error) error {
	message := strings.TrimPrefix(err.Error(), "swarm: ")
	switch {
	case errors.Is(err, swarm.ErrInvalid):
		return badRequest("%s", strings.TrimSuffix(message, ": "+swarm.ErrInvalid.Error()))
	case errors.Is(err, swarm.ErrNotFound):
		return newAPIError(http.StatusNotFound, "not_found", message)
	}
	return err
}

func hexHash(hash bittorrent.InfoHash) string { return hex.EncodeToString(hash[:]) }

// RedactPasskey shows enough of a passkey to tell two apart in a log and
// never enough to use it: at most its first 4 characters, fewer for short
// ones.
func RedactPasskey(passkey string) string {
	return passkey[:min(4, len(passkey)/4)] + "…"
}

// TorrentRecord is a torrent's record as the admin API shows it. Counts
// are exact; times are absent when they never happened.
type TorrentRecord struct {
	InfoHash   string     `json:"info_hash"`
	ID         string     `json:"id"`
	Registered bool       `json:"registered"`
	Uploader   string     `json:"uploader,omitempty"`
	Created    *time.Time `json:"created,omitempty"`
	LastAction *time.Time `json:"last_action,omitempty"`
	Announces  int64      `json:"announces"`
	Seeders    int64      `json:"seeders"`
	Leechers   int64      `json:"leechers"`
	Snatches   int64      `json:"snatches"`
	Value      float64    `json:"value,omitempty"`
	Size       int64      `json:"size,omitempty"`
	// Credit is the site's credit status for it (PUT …/credit).
	Credit swarm.Credit `json:"credit"`
}

func torrentRecord(info swarm.TorrentInfo) TorrentRecord {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		utc := t.UTC()
		return &utc
	}
	return TorrentRecord{
		InfoHash: hexHash(info.InfoHash), ID: info.ID, Registered: info.ID != "", Uploader: info.Uploader,
		Created: at(info.Created), LastAction: at(info.LastAction),
		Announces: info.Announces, Seeders: info.Seeders, Leechers: info.Leechers, Snatches: info.Snatches, Value: info.Value, Size: info.Size, Credit: info.Credit,
	}
}

// RegisterTorrentRequest is the body of PUT …/torrents/:infohash. The id
// and uploader may be JSON strings or numbers; created is the upload's
// creation time (RFC 3339), which the reaper ages a never-seeded upload
// by (absent: the time of the first registration).
type RegisterTorrentRequest struct {
	ID       LooseString `json:"id"`
	Uploader LooseString `json:"uploader"`
	Created  *time.Time  `json:"created"`
	// Value is what the upload is worth to the site (e.g. its size in
	// GiB): a reseed claim earns the reaper's reward_factor x Value (1
	// when never given).
	Value float64 `json:"value"`
	// Size is the torrent's size in bytes, for the over-download cheat
	// signal (absent or 0 keeps the stored one).
	Size int64 `json:"size"`
	// Trackers, when present, replace the torrent's external trackers.
	Trackers *[]scoring.Tracker `json:"trackers"`
}

// RegisterTorrentReply answers PUT …/torrents/:infohash; PreviousID is
// the id the torrent had before, if it was registered.
type RegisterTorrentReply struct {
	InfoHash   string            `json:"info_hash"`
	ID         string            `json:"id"`
	PreviousID string            `json:"previous_id,omitempty"`
	Trackers   []scoring.Tracker `json:"trackers,omitempty"`
}

func (b *Admin) registerTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	var req RegisterTorrentRequest
	if !decode(c, &req) {
		return
	}
	if req.ID == "" {
		_ = c.Error(badRequest(`the body needs the site's torrent id: {"id": "123"}`))
		return
	}
	var trackers []scoring.Tracker
	if req.Trackers != nil {
		// Checked before anything is written: a bad list changes nothing.
		if b.Scorer == nil {
			_ = c.Error(newAPIError(http.StatusServiceUnavailable, "scoring_off", "this hoard has no scoring store for trackers"))
			return
		}
		if trackers, err = b.Scorer.CheckTrackers(*req.Trackers); err != nil {
			_ = c.Error(scoringError(err))
			return
		}
	}
	ctx := c.Request.Context()
	var previous string
	switch info, err := b.Store.Torrent(ctx, hash); {
	case err == nil:
		previous = info.ID
	case !errors.Is(err, swarm.ErrNotFound):
		_ = c.Error(err)
		return
	}
	reg := swarm.Registration{ID: string(req.ID), Uploader: string(req.Uploader), Value: req.Value, Size: req.Size}
	if req.Created != nil {
		reg.Created = *req.Created
	}
	if err := b.Store.Register(ctx, hash, reg); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logged := []any{"info_hash", hexHash(hash), "id", string(req.ID), "previous_id", previous}
	if reg.Uploader != "" {
		logged = append(logged, "uploader", reg.Uploader)
	}
	if req.Trackers != nil {
		if trackers, _, err = b.Scorer.SetTrackers(ctx, hash, trackers); err != nil {
			_ = c.Error(scoringError(err))
			return
		}
		logged = append(logged, "trackers", len(trackers))
	}
	if b.ScoreOnRegister && b.Scorer != nil {
		// The scoring job tracks every torrent it finds anyway: a failure
		// here only delays the score until its next run.
		if _, err := b.Scorer.Track(ctx, hash); err != nil {
			slog.Default().WarnContext(ctx, "could not put a registered torrent into scoring; the scoring job will", "info_hash", hexHash(hash), "err", err)
		}
	}
	logChange(c, "torrent registered", logged...)
	c.JSON(http.StatusOK, RegisterTorrentReply{InfoHash: hexHash(hash), ID: string(req.ID), PreviousID: previous, Trackers: trackers})
}

func (b *Admin) unregisterTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	// The body is optional: {"reason": "Trumped"}.
	var req DeleteTorrentRequest
	if c.Request.ContentLength != 0 && !decode(c, &req) {
		return
	}
	if req.Reason != "" {
		if err := swarm.CheckReason(req.Reason); err != nil {
			_ = c.Error(swarmError(err))
			return
		}
	}
	ctx := c.Request.Context()
	info, err := b.Store.Torrent(ctx, hash)
	if c.Query("purge") == "true" && (err == nil || errors.Is(err, swarm.ErrNotFound)) {
		// also once unregistered: "purge again once they left"
		b.purgeTorrent(c, hash, info.ID, req.Reason)
		return
	}
	if err == nil && info.ID == "" {
		err = swarm.ErrNotFound
	}
	if errors.Is(err, swarm.ErrNotFound) {
		_ = c.Error(newAPIError(http.StatusNotFound, "not_registered", "torrent "+hexHash(hash)+" is not registered"))
		return
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	if err := b.Store.DeleteTorrent(ctx, hash, req.Reason); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logged := []any{"info_hash", hexHash(hash), "id", info.ID}
	if req.Reason != "" {
		logged = append(logged, "reason", req.Reason)
	}
	logChange(c, "torrent unregistered", logged...)
	reply := gin.H{"info_hash": hexHash(hash), "unregistered_id": info.ID}
	if req.Reason != "" {
		reply["reason"] = req.Reason
		reply["reason_until"] = time.Now().Add(b.Store.Config().DeletedReasonTTL).UTC().Truncate(time.Second)
	}
	c.JSON(http.StatusOK, reply)
}

// DeleteTorrentRequest is the optional body of DELETE …/torrents/:infohash:
// the reason clients read ("torrent deleted: <reason>") for the plugin's
// deleted_reason_ttl, e.g. "Trumped" or "Dupe". 1-200 bytes, no control
// characters.
type DeleteTorrentRequest struct {
	Reason string `json:"reason"`
}

// purgeTorrent answers DELETE …/torrents/:infohash?purge=true: unregister
// and delete every record of the torrent now (swarm.PurgeTorrent), but for
// the site's deletion reason, which clients still read until it expires.
// With peers in its swarm it is unregistered only, and says so (409).
func (b *Admin) purgeTorrent(c *gin.Context, hash bittorrent.InfoHash, id, reason string) {
	n, err := b.Store.PurgeTorrent(c.Request.Context(), hash, reason)
	if errors.Is(err, btstore.ErrHasPeers) {
		logChange(c, "torrent unregistered", "info_hash", hexHash(hash), "id", id)
		_ = c.Error(newAPIError(http.StatusConflict, "has_peers", "torrent "+hexHash(hash)+
			" is unregistered, but its swarm still has peers, so its records stay until orphan cleanup removes them; purge again once they left"))
		return
	}
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "torrent purged", "info_hash", hexHash(hash), "id", id, "keys", n)
	c.JSON(http.StatusOK, gin.H{"info_hash": hexHash(hash), "unregistered_id": id, "purged_keys": n})
}

func (b *Admin) showTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	info, err := b.Store.Torrent(c.Request.Context(), hash)
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	c.JSON(http.StatusOK, torrentRecord(info))
}

// AddUserRequest is the body of PUT …/users/:passkey. The user id may be a
// JSON string or number.
type AddUserRequest struct {
	UserID LooseString `json:"user_id"`
}

// UserChangeReply answers PUT and DELETE …/users/:passkey, with the
// passkey redacted.
type UserChangeReply struct {
	Passkey string `json:"passkey"`
	UserID  string `json:"user_id,omitempty"`
}

func (b *Admin) addUser(c *gin.Context) {
	passkey := c.Param("passkey")
	var req AddUserRequest
	if !decode(c, &req) {
		return
	}
	if req.UserID == "" {
		_ = c.Error(badRequest(`the body needs the site's user id: {"user_id": "7"}`))
		return
	}
	if err := b.Store.AddUser(c.Request.Context(), passkey, string(req.UserID)); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "passkey added", "passkey", RedactPasskey(passkey), "user_id", string(req.UserID))
	c.JSON(http.StatusOK, UserChangeReply{Passkey: RedactPasskey(passkey), UserID: string(req.UserID)})
}

// removeUser forgets a passkey. The store cannot tell a known passkey from
// an unknown one without reading it, and forgetting is idempotent, so an
// unknown passkey is not an error.
func (b *Admin) removeUser(c *gin.Context) {
	passkey := c.Param("passkey")
	if err := b.Store.RemoveUser(c.Request.Context(), passkey); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "passkey removed", "passkey", RedactPasskey(passkey))
	c.JSON(http.StatusOK, UserChangeReply{Passkey: RedactPasskey(passkey)})
}

// TrackerUser is what the tracker knows of one user: the site's torrent
// ids in each set, their sizes, and the transfer totals in bytes. A user
// the tracker never saw has empty sets. Everything lags by up to one
// flush interval per frontend.
type TrackerUser struct {
	UserID     string         `json:"user_id"`
	Active     []string       `json:"active"`
	Complete   []string       `json:"complete"`
	Incomplete []string       `json:"incomplete"`
	HnR        []string       `json:"hnr"`
	Counts     map[string]int `json:"counts"`
	Uploaded   int64          `json:"uploaded"`
	Downloaded int64          `json:"downloaded"`
	// UpCredited and DownCredited are the credited transfer (freeleech,
	// windows, tokens applied), summed like the raw figures.
	UpCredited   int64 `json:"up_credited"`
	DownCredited int64 `json:"down_credited"`
}

func (b *Admin) showUser(c *gin.Context) {
	userID := c.Param("user_id")
	summary, err := b.Store.User(c.Request.Context(), userID)
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	nonNil := func(ids []string) []string {
		if ids == nil {
			return []string{}
		}
		return ids
	}
	c.JSON(http.StatusOK, TrackerUser{
		UserID: userID,
		Active: nonNil(summary.Active), Complete: nonNil(summary.Complete),
		Incomplete: nonNil(summary.Incomplete), HnR: nonNil(summary.HnR),
		Counts: map[string]int{"active": len(summary.Active), "complete": len(summary.Complete),
			"incomplete": len(summary.Incomplete), "hnr": len(summary.HnR)},
		Uploaded: summary.Uploaded, Downloaded: summary.Downloaded,
		UpCredited: summary.UpCredited, DownCredited: summary.DownCredited,
	})
}

// WhitelistedClient is one entry of the client whitelist.
type WhitelistedClient struct {
	Prefix string `json:"prefix"`
	Name   string `json:"name"`
}

// ClientsReply answers GET …/clients. Warning is set when the list is
// empty: a private tracker refuses every client then.
type ClientsReply struct {
	Clients []WhitelistedClient `json:"clients"`
	Warning string              `json:"warning,omitempty"`
}

// EmptyWhitelistWarning is ClientsReply.Warning for an empty whitelist.
const EmptyWhitelistWarning = "the client whitelist is empty: a tracker in private mode refuses every client"

func (b *Admin) listClients(c *gin.Context) {
	clients, err := b.Store.Clients(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	reply := ClientsReply{Clients: make([]WhitelistedClient, 0, len(clients))}
	for _, client := range clients {
		reply.Clients = append(reply.Clients, WhitelistedClient{Prefix: client.Prefix, Name: client.Name})
	}
	if len(reply.Clients) == 0 {
		reply.Warning = EmptyWhitelistWarning
	}
	c.JSON(http.StatusOK, reply)
}

// clientPrefix is the prefix in a …/clients/*prefix path, unescaped by
// net/url.
func clientPrefix(c *gin.Context) string { return strings.TrimPrefix(c.Param("prefix"), "/") }

// AddClientRequest is the optional body of PUT …/clients/*prefix.
type AddClientRequest struct {
	Name string `json:"name"`
}

func (b *Admin) addClient(c *gin.Context) {
	prefix := clientPrefix(c)
	var req AddClientRequest
	if c.Request.ContentLength != 0 && !decode(c, &req) {
		return
	}
	if err := b.Store.AddClient(c.Request.Context(), prefix, req.Name); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "client whitelisted", "prefix", prefix, "name", req.Name)
	c.JSON(http.StatusOK, WhitelistedClient{Prefix: prefix, Name: req.Name})
}

func (b *Admin) removeClient(c *gin.Context) {
	prefix := clientPrefix(c)
	ctx := c.Request.Context()
	clients, err := b.Store.Clients(ctx)
	if err != nil {
		_ = c.Error(err)
		return
	}
	var removed *swarm.Client
	for i := range clients {
		if clients[i].Prefix == prefix {
			removed = &clients[i]
		}
	}
	if removed == nil {
		_ = c.Error(newAPIError(http.StatusNotFound, "not_whitelisted", "no client prefix "+strconv.Quote(prefix)+" is whitelisted"))
		return
	}
	if err := b.Store.RemoveClient(ctx, prefix); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "client removed from whitelist", "prefix", prefix, "name", removed.Name)
	c.JSON(http.StatusOK, WhitelistedClient{Prefix: removed.Prefix, Name: removed.Name})
}

// SwarmStats are the global counters over every frontend; they lag by up
// to one flush interval per frontend.
type SwarmStats struct {
	Announces int64 `json:"announces"`
	Scrapes   int64 `json:"scrapes"`
	Requests  int64 `json:"requests"`
	Seeders   int64 `json:"seeders"`
	Leechers  int64 `json:"leechers"`
	Snatches  int64 `json:"snatches"`
}

func (b *Admin) stats(c *gin.Context) {
	s, err := b.Store.Stats(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, SwarmStats{Announces: s.Announces, Scrapes: s.Scrapes, Requests: s.Requests,
		Seeders: s.Seeders, Leechers: s.Leechers, Snatches: s.Snatches})
}

// RankedTorrent is one line of GET …/top.
type RankedTorrent struct {
	InfoHash string `json:"info_hash"`
	Count    int64  `json:"count"`
}

// TopReply answers GET …/top.
type TopReply struct {
	By       string          `json:"by"`
	Torrents []RankedTorrent `json:"torrents"`
}

func (b *Admin) top(c *gin.Context) {
	by := c.DefaultQuery("by", string(btstore.IndexSeeders))
	switch btstore.Index(by) {
	case btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches:
	default:
		_ = c.Error(badRequest("by=%q: want seeders, leechers or snatches", by))
		return
	}
	n := DefaultTopCount
	if text, ok := c.GetQuery("n"); ok {
		var err error
		if n, err = strconv.Atoi(text); err != nil || n < 1 || n > MaxTopCount {
			_ = c.Error(badRequest("n=%q: want a whole number from 1 to %d", text, MaxTopCount))
			return
		}
	}
	ranked, err := b.Store.Top(c.Request.Context(), btstore.Index(by), n)
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	reply := TopReply{By: by, Torrents: make([]RankedTorrent, 0, len(ranked))}
	for _, r := range ranked {
		reply.Torrents = append(reply.Torrents, RankedTorrent{InfoHash: hexHash(r.InfoHash), Count: r.Count})
	}
	c.JSON(http.StatusOK, reply)
}

// scoringError turns scoring's argument errors into 400 replies with its
// own explanation.
func scoringError(err error) error {
	if errors.Is(err, scoring.ErrInvalid) {
		return badRequest("%s", strings.TrimSuffix(err.Error(), ": "+scoring.ErrInvalid.Error()))
	}
	return err
}

// TrackersReply answers the …/trackers calls: the torrent's external
// trackers after the call, and for PUT and DELETE how many it had before.
type TrackersReply struct {
	InfoHash string            `json:"info_hash"`
	Trackers []scoring.Tracker `json:"trackers"`
	Before   *int              `json:"before,omitempty"`
}

// SetTrackersRequest is the body of PUT …/torrents/:infohash/trackers.
type SetTrackersRequest struct {
	Trackers []scoring.Tracker `json:"trackers"`
}

func (b *Admin) showTrackers(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	trackers, err := b.Scorer.Trackers(c.Request.Context(), hash)
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, TrackersReply{InfoHash: hexHash(hash), Trackers: trackers})
}

func (b *Admin) setTrackers(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	var req SetTrackersRequest
	if !decode(c, &req) {
		return
	}
	if req.Trackers == nil {
		_ = c.Error(badRequest(`the body needs the list: {"trackers": [{"url": "udp://host:port/announce", "max_peers": 50}]} (an empty list, or DELETE, clears it)`))
		return
	}
	b.replaceTrackers(c, hash, req.Trackers)
}

func (b *Admin) clearTrackers(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	b.replaceTrackers(c, hash, nil)
}

func (b *Admin) replaceTrackers(c *gin.Context, hash bittorrent.InfoHash, trackers []scoring.Tracker) {
	list, before, err := b.Scorer.SetTrackers(c.Request.Context(), hash, trackers)
	if err != nil {
		_ = c.Error(scoringError(err))
		return
	}
	urls := make([]string, len(list))
	for i, t := range list {
		urls[i] = t.URL
	}
	logChange(c, "external trackers set", "info_hash", hexHash(hash), "trackers", urls, "before", before)
	c.JSON(http.StatusOK, TrackersReply{InfoHash: hexHash(hash), Trackers: list, Before: &before})
}

func (b *Admin) showScore(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	v, err := b.Scorer.View(c.Request.Context(), hash)
	if err != nil {
		_ = c.Error(err)
		return
	}
	if v.State == "" && len(v.History) == 0 && len(v.Sources) <= 1 {
		_ = c.Error(newAPIError(http.StatusNotFound, "not_scored", "torrent "+hexHash(hash)+" has never been scored"))
		return
	}
	c.JSON(http.StatusOK, v)
}

// TopScoresReply answers GET …/scores/top.
type TopScoresReply struct {
	Torrents []scoring.Ranked `json:"torrents"`
}

func (b *Admin) topScores(c *gin.Context) {
	n := DefaultTopCount
	if text, ok := c.GetQuery("n"); ok {
		var err error
		if n, err = strconv.Atoi(text); err != nil || n < 1 || n > scoring.MaxTop {
			_ = c.Error(badRequest("n=%q: want a whole number from 1 to %d", text, scoring.MaxTop))
			return
		}
	}
	top, err := b.Scorer.Top(c.Request.Context(), n)
	if err != nil {
		_ = c.Error(scoringError(err))
		return
	}
	c.JSON(http.StatusOK, TopScoresReply{Torrents: top})
}

// requirePart refuses every call of a route group with 503 and the given
// code and message while a part of the tracker is not configured
// (present reports false at the time of the call).
func requirePart(present func() bool, code, message string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !present() {
			_ = c.Error(newAPIError(http.StatusServiceUnavailable, code, message))
			c.Abort()
			return
		}
		c.Next()
	}
}
