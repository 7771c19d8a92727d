package main

import (
	"encoding/json"
	"time"
)

// The BitTorrent plugin's API as `hoard bt` reads it: the JSON of the
// replies the CLI prints, in structs of its own. The CLI speaks HTTP and
// JSON only and links none of the plugin's packages, so a plugin of
// another version (or another build) is driven the same way; the plugin
// checks every argument, and the CLI repeats a check only to fail before
// a call.

// Bounds and defaults of the plugin's calls, for the flags' defaults and
// help.
const (
	btDefaultTopCount      = 10
	btMaxTopCount          = 1000
	btMaxScoresTop         = 1000
	btDefaultOutboxLimit   = 100
	btMaxOutboxLimit       = 1000
	btMaxExtensionDays     = 3650
	btDefaultMetricsTop    = 20
	btMaxMetricsTop        = 1000
	btDefaultMetricsMonths = 12
	btMaxMetricsMonths     = 120
)

type btTracker struct {
	URL      string `json:"url"`
	MaxPeers int    `json:"max_peers"`
}

type btRegisterTorrentReply struct {
	InfoHash   string      `json:"info_hash"`
	ID         string      `json:"id"`
	PreviousID string      `json:"previous_id,omitempty"`
	Trackers   []btTracker `json:"trackers,omitempty"`
}

type btTorrentRecord struct {
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
}

type btUserChangeReply struct {
	Passkey string `json:"passkey"`
	UserID  string `json:"user_id,omitempty"`
}

type btTrackerUser struct {
	UserID     string         `json:"user_id"`
	Active     []string       `json:"active"`
	Complete   []string       `json:"complete"`
	Incomplete []string       `json:"incomplete"`
	HnR        []string       `json:"hnr"`
	Counts     map[string]int `json:"counts"`
	Uploaded   int64          `json:"uploaded"`
	Downloaded int64          `json:"downloaded"`
}

type btWhitelistedClient struct {
	Prefix string `json:"prefix"`
	Name   string `json:"name"`
}

type btAddClientRequest struct {
	Name string `json:"name"`
}

type btClientsReply struct {
	Clients []btWhitelistedClient `json:"clients"`
	Warning string                `json:"warning,omitempty"`
}

type btSwarmStats struct {
	Announces int64 `json:"announces"`
	Scrapes   int64 `json:"scrapes"`
	Requests  int64 `json:"requests"`
	Seeders   int64 `json:"seeders"`
	Leechers  int64 `json:"leechers"`
	Snatches  int64 `json:"snatches"`
}

type btTopReply struct {
	By       string `json:"by"`
	Torrents []struct {
		InfoHash string `json:"info_hash"`
		Count    int64  `json:"count"`
	} `json:"torrents"`
}

// btOutboxEvent is printed as the plugin sent it, field for field.
type btOutboxEvent struct {
	ID        uint64          `json:"id,string"`
	Key       string          `json:"idempotency_key"`
	Kind      string          `json:"kind"`
	At        time.Time       `json:"at"`
	Body      json.RawMessage `json:"body"`
	Attempts  int             `json:"attempts,omitempty"`
	LastError string          `json:"last_error,omitempty"`
}

type btOutboxCounts struct {
	Pending    int64 `json:"pending"`
	Dead       int64 `json:"dead"`
	Kept       int64 `json:"kept"`
	Appended   int64 `json:"appended"`
	Duplicates int64 `json:"duplicates"`
	Attempts   int64 `json:"attempts"`
	Failures   int64 `json:"failures"`
	Delivered  int64 `json:"delivered"`
	Died       int64 `json:"died"`
	Retried    int64 `json:"retried"`
}

type btOutboxEventsReply struct {
	Events []btOutboxEvent `json:"events"`
	Next   string          `json:"next"`
	Counts btOutboxCounts  `json:"counts"`
}

type btOutboxChangeReply struct {
	Acknowledged        int            `json:"acknowledged,omitempty"`
	AlreadyAcknowledged int            `json:"already_acknowledged,omitempty"`
	Retried             int            `json:"retried,omitempty"`
	Counts              btOutboxCounts `json:"counts"`
}

type btTrackersReply struct {
	InfoHash string      `json:"info_hash"`
	Trackers []btTracker `json:"trackers"`
	Before   *int        `json:"before,omitempty"`
}

type btSetTrackersRequest struct {
	Trackers []btTracker `json:"trackers"`
}

type btScoreView struct {
	InfoHash string  `json:"info_hash"`
	State    string  `json:"state"`
	Score    float64 `json:"score"`
	Round    int64   `json:"round"`
	Indexed  bool    `json:"indexed"`
	Sources  []struct {
		Source   string     `json:"source"`
		MaxPeers int        `json:"max_peers"`
		Line     *float64   `json:"line"`
		Peers    int64      `json:"last_peers"`
		New      int64      `json:"last_new"`
		Mult     float64    `json:"last_mult,omitempty"`
		Error    string     `json:"last_error,omitempty"`
		Fails    int        `json:"fails,omitempty"`
		Applied  *time.Time `json:"last_at,omitempty"`
	} `json:"sources"`
	History []struct {
		Round   int64     `json:"round"`
		At      time.Time `json:"at"`
		Score   float64   `json:"score"`
		Removed bool      `json:"removed,omitempty"`
		Sources []struct {
			Source string  `json:"source"`
			Peers  int64   `json:"peers"`
			New    int64   `json:"new"`
			Max    int64   `json:"max"`
			Mult   float64 `json:"mult"`
			Error  string  `json:"error,omitempty"`
		} `json:"sources"`
	} `json:"history"`
}

type btTopScoresReply struct {
	Torrents []struct {
		InfoHash string  `json:"info_hash"`
		Score    float64 `json:"score"`
	} `json:"torrents"`
}

type btExtendRequest struct {
	InfoHash string          `json:"info_hash,omitempty"`
	User     string          `json:"user,omitempty"`
	Days     json.RawMessage `json:"days"`
}

type btExtendReply struct {
	Days     int `json:"days"`
	Extended []struct {
		InfoHash     string    `json:"info_hash"`
		Notify       string    `json:"notify"`
		UnseededDate time.Time `json:"unseeded_date"`
	} `json:"extended"`
}

type btReaperPreview struct {
	At    time.Time `json:"at"`
	Steps []struct {
		Step      string    `json:"step"`
		InfoHash  string    `json:"info_hash"`
		TorrentID string    `json:"torrent_id"`
		Uploader  string    `json:"uploader"`
		State     string    `json:"state"`
		DueSince  time.Time `json:"due_since"`
	} `json:"steps"`
	Due      int `json:"due"`
	LeftOver int `json:"left_over"`
	Users    int `json:"users"`
	Rewards  []struct {
		InfoHash string   `json:"info_hash"`
		Users    []string `json:"users"`
		Points   float64  `json:"points"`
	} `json:"rewards"`
}

type btReaperCounts struct {
	CountedAt       time.Time `json:"counted_at"`
	NeverInitial    int64     `json:"never_initial"`
	NeverFinal      int64     `json:"never_final"`
	UnseededInitial int64     `json:"unseeded_initial"`
	UnseededFinal   int64     `json:"unseeded_final"`
	ClaimWindows    int64     `json:"claim_windows"`
	RewardsWaiting  int64     `json:"rewards_waiting"`
	InitialDone     int64     `json:"initial_done"`
	FinalDone       int64     `json:"final_done"`
	Removed         int64     `json:"removed"`
	Invited         int64     `json:"invited"`
	Claims          int64     `json:"claims"`
	Rewards         int64     `json:"rewards"`
	Extensions      int64     `json:"extensions"`
	Notices         int64     `json:"notices"`
}

type btReaperTorrent struct {
	InfoHash     string     `json:"info_hash"`
	State        string     `json:"state,omitempty"`
	Notify       string     `json:"notify,omitempty"`
	UnseededDate *time.Time `json:"unseeded_date,omitempty"`
	ClaimUntil   *time.Time `json:"claim_until,omitempty"`
	Pending      string     `json:"pending,omitempty"`
	// Claims are the plugin's reaper.Claim, which it encodes without
	// tags: User, At, Rewarded.
	Claims []struct {
		User     string
		At       time.Time
		Rewarded bool
	} `json:"claims"`
	Invited []string `json:"invited"`
}

type btPlaceCount struct {
	Country string `json:"country"`
	Name    string `json:"name,omitempty"`
	Users   int64  `json:"users"`
}

type btMetricsReport struct {
	Torrent   string         `json:"torrent,omitempty"`
	Month     string         `json:"month,omitempty"`
	Users     int64          `json:"users"`
	Countries []btPlaceCount `json:"countries"`
	Cities    []btPlaceCount `json:"cities"`
	Postcodes []btPlaceCount `json:"postcodes"`
	Months    []struct {
		Month string `json:"month"`
		Users int64  `json:"users"`
	} `json:"months,omitempty"`
}
