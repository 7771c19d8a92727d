package outbox

// Every key of the outbox shares the hash tag {outbox}, so each script
// touches one slot and runs the same on one Redis and on a cluster. The
// outbox is one slot: its traffic (reaper notices, a few per torrent per
// month) is far below what one slot serves.

const keyPrefix = "hoard:bt:{outbox}:"

// SeqKey is the last event id given (STRING).
func SeqKey() string { return keyPrefix + "seq" }

// EventsKey maps an event id to its record (HASH id -> JSON key, kind,
// body, at), for pending, dead and the kept delivered events.
func EventsKey() string { return keyPrefix + "events" }

// PendingKey holds the events not delivered and not dead (ZSET id -> id),
// in id order for polling sites.
func PendingKey() string { return keyPrefix + "pending" }

// DueKey is when a deliverer may next try each pending event (ZSET id ->
// ms): now when appended, the lease's end while a request is out, the
// backoff's end after a failure.
func DueKey() string { return keyPrefix + "due" }

// AttemptsKey counts the attempts begun per pending event (HASH id -> n).
func AttemptsKey() string { return keyPrefix + "attempts" }

// ErrorsKey keeps each failing event's last failure in words (HASH id ->
// text), for the dead list.
func ErrorsKey() string { return keyPrefix + "errors" }

// DeadKey holds the events whose attempts ran out (ZSET id -> id, in id
// order for listing). They are kept until an operator retries them.
func DeadKey() string { return keyPrefix + "dead" }

// DeliveredKey holds the newest delivered events (ZSET id -> ms
// delivered), trimmed to keep_delivered.
func DeliveredKey() string { return keyPrefix + "delivered" }

// DedupKey is the bounded record of recent idempotency keys (ZSET key ->
// ms appended).
func DedupKey() string { return keyPrefix + "dedup" }

// StatsKey holds the counters (HASH appended, duplicates, attempts,
// failures, delivered, dead, retried).
func StatsKey() string { return keyPrefix + "stats" }

// ConfigKey holds the settings every process that acknowledges must agree
// on (HASH keep_delivered), saved by the plugin.
func ConfigKey() string { return keyPrefix + "config" }

func appendKeys() []string {
	return []string{SeqKey(), EventsKey(), PendingKey(), DueKey(), DedupKey(), StatsKey()}
}

func claimKeys() []string {
	return []string{DueKey(), EventsKey(), AttemptsKey(), PendingKey(), DeadKey(), ErrorsKey(), StatsKey()}
}

func ackKeys() []string {
	return []string{PendingKey(), DueKey(), AttemptsKey(), ErrorsKey(), EventsKey(), DeliveredKey(), ConfigKey(), StatsKey()}
}

func failKeys() []string {
	return []string{PendingKey(), DueKey(), AttemptsKey(), DeadKey(), ErrorsKey(), StatsKey()}
}

func retryKeys() []string {
	return []string{DeadKey(), PendingKey(), DueKey(), AttemptsKey(), StatsKey()}
}
