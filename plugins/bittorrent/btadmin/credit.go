package btadmin

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Credited transfer (docs/bittorrent-site.md, "Credited transfer"): the
// site sets a torrent's credit status, site-wide windows and personal
// tokens; announces credit transfer with them.
//
//	PUT    /torrents/:infohash/credit            {"kind":"freeleech"}  or {"kind":"percent_off","percent_off":25}
//	GET    /credit/windows                       the site-wide windows
//	PUT    /credit/windows/:id                   {"kind":"freeleech","start":"…","end":"…"}
//	DELETE /credit/windows/:id
//	PUT    /users/by-id/:user_id/tokens/:infohash  [{"until":"…"}]  grant a token (no until: for ever)
//	DELETE /users/by-id/:user_id/tokens/:infohash  revoke it
//	GET    /users/by-id/:user_id/torrents/:infohash  the user's raw and credited transfer on the torrent, and
//	                                         its seq: what the site reconciles its ledger's newest row with,
//	                                         and the transfer ledger (its last announces with transfer)

func (b *Admin) registerCredit(bt *gin.RouterGroup) {
	bt.PUT("/torrents/:infohash/credit", b.setTorrentCredit)
	bt.GET("/credit/windows", b.listWindows)
	bt.PUT("/credit/windows/:id", b.setWindow)
	bt.DELETE("/credit/windows/:id", b.removeWindow)
	bt.PUT("/users/by-id/:user_id/tokens/:infohash", b.grantToken)
	bt.DELETE("/users/by-id/:user_id/tokens/:infohash", b.revokeToken)
	bt.GET("/users/by-id/:user_id/torrents/:infohash", b.showUserTorrent)
}

func (b *Admin) setTorrentCredit(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	var req swarm.Credit
	if !decode(c, &req) {
		return
	}
	if err := b.Store.SetTorrentCredit(c.Request.Context(), hash, req); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "torrent credit set", "info_hash", hexHash(hash), "kind", string(req.Kind), "percent_off", req.PercentOff)
	c.JSON(http.StatusOK, gin.H{"info_hash": hexHash(hash), "credit": req})
}

// WindowRequest is the body of PUT …/credit/windows/:id.
type WindowRequest struct {
	swarm.Credit
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// WindowsReply answers GET …/credit/windows.
type WindowsReply struct {
	Windows []swarm.CreditWindow `json:"windows"`
}

func (b *Admin) listWindows(c *gin.Context) {
	windows, err := b.Store.CreditWindows(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, WindowsReply{Windows: windows})
}

func (b *Admin) setWindow(c *gin.Context) {
	var req WindowRequest
	if !decode(c, &req) {
		return
	}
	w := swarm.CreditWindow{ID: c.Param("id"), Credit: req.Credit, Start: req.Start.UTC(), End: req.End.UTC()}
	if err := b.Store.SetCreditWindow(c.Request.Context(), w); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "credit window set", "id", w.ID, "kind", string(w.Kind), "start", w.Start, "end", w.End)
	c.JSON(http.StatusOK, w)
}

func (b *Admin) removeWindow(c *gin.Context) {
	id := c.Param("id")
	if err := b.Store.RemoveCreditWindow(c.Request.Context(), id); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "credit window removed", "id", id)
	c.Status(http.StatusNoContent)
}

// TokenRequest is the optional body of PUT …/tokens/:infohash.
type TokenRequest struct {
	Until *time.Time `json:"until"`
}

func (b *Admin) grantToken(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	var req TokenRequest
	if c.Request.ContentLength != 0 && !decode(c, &req) {
		return
	}
	var until time.Time
	if req.Until != nil {
		until = req.Until.UTC()
	}
	userID := c.Param("user_id")
	if err := b.Store.GrantToken(c.Request.Context(), hash, userID, until); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "token granted", "info_hash", hexHash(hash), "user_id", userID, "until", until)
	c.JSON(http.StatusOK, gin.H{"info_hash": hexHash(hash), "user_id": userID, "until": req.Until})
}

func (b *Admin) revokeToken(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	userID := c.Param("user_id")
	if err := b.Store.RevokeToken(c.Request.Context(), hash, userID); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	logChange(c, "token revoked", "info_hash", hexHash(hash), "user_id", userID)
	c.Status(http.StatusNoContent)
}

// UserTorrentRecord is a user's record on one torrent as the admin API
// shows it: raw and credited transfer (bytes), seed and leech time, and
// the personal token. Times are absent when they never happened.
type UserTorrentRecord struct {
	InfoHash      string     `json:"info_hash"`
	UserID        string     `json:"user_id"`
	Uploaded      int64      `json:"uploaded"`
	Downloaded    int64      `json:"downloaded"`
	UpCredited    int64      `json:"up_credited"`
	DownCredited  int64      `json:"down_credited"`
	Seq           int64      `json:"seq"`
	SeedSeconds   int64      `json:"seed_seconds"`
	LeechSeconds  int64      `json:"leech_seconds"`
	Token         bool       `json:"token"`
	TokenUntil    *time.Time `json:"token_until,omitempty"`
	TokenUsed     *time.Time `json:"token_used,omitempty"`
	TokenEnded    *time.Time `json:"token_ended,omitempty"`
	FirstAnnounce *time.Time `json:"first_announce,omitempty"`
	LastAnnounce  *time.Time `json:"last_announce,omitempty"`
	// Ledger is the record's last announces with transfer, newest first
	// (accounting.ledger_entries of them; absent when off).
	Ledger []LedgerRow `json:"ledger,omitempty"`
}

// LedgerRow is one announce with transfer: raw and credited deltas
// (bytes), the time since the peer's previous announce and the rates
// over it (bytes/s; 0 when that time is unknown).
type LedgerRow struct {
	At           time.Time `json:"at"`
	Uploaded     int64     `json:"uploaded"`
	Downloaded   int64     `json:"downloaded"`
	UpCredited   int64     `json:"up_credited"`
	DownCredited int64     `json:"down_credited"`
	ElapsedMS    int64     `json:"elapsed_ms"`
	UploadRate   float64   `json:"upload_rate"`
	DownloadRate float64   `json:"download_rate"`
}

func (b *Admin) showUserTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	userID := c.Param("user_id")
	u, err := b.Store.UserOnTorrent(c.Request.Context(), hash, userID)
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	var ledger []LedgerRow
	for _, e := range u.Ledger {
		ledger = append(ledger, LedgerRow{At: e.At, Uploaded: e.Uploaded, Downloaded: e.Downloaded, UpCredited: e.UpCredited,
			DownCredited: e.DownCredited, ElapsedMS: e.Elapsed.Milliseconds(), UploadRate: e.UploadRate, DownloadRate: e.DownloadRate})
	}
	c.JSON(http.StatusOK, UserTorrentRecord{
		InfoHash: hexHash(hash), UserID: userID, Uploaded: u.Uploaded, Downloaded: u.Downloaded,
		UpCredited: u.UpCredited, DownCredited: u.DownCredited, Seq: u.Seq,
		SeedSeconds: int64(u.SeedTime / time.Second), LeechSeconds: int64(u.LeechTime / time.Second),
		Token: u.Token, TokenUntil: at(u.TokenUntil), TokenUsed: at(u.TokenUsed), TokenEnded: at(u.TokenEnded),
		FirstAnnounce: at(u.FirstAnnounce), LastAnnounce: at(u.LastAnnounce), Ledger: ledger,
	})
}
