// Package outbox is the BitTorrent plugin's durable outbox: events the
// site must receive (the reaper's notices, removals, invitations, claims
// and rewards; later others) are appended to Redis in the same slot, then
// pushed to the site's webhook or read by a site that polls.
//
// The guarantees, and what carries each:
//
//   - Durable: an appended event is in Redis (outbox_append.lua, one
//     script per batch, all or nothing) until it is delivered or an
//     operator retries it out of the dead set. Nothing is dropped.
//   - Once per key at the source: an event whose idempotency key was
//     appended within the dedup window is stored once.
//   - At least once to the site: a deliverer takes due events under a
//     lease (outbox_claim.lua), POSTs them, and marks them delivered only
//     after a 2xx (outbox_ack.lua). A deliverer killed between the two
//     leaves the events leased; when the lease ends any deliverer takes
//     them again. Several frontends deliver at once; an event can reach
//     the site twice (a lease that ended under a slow request), never
//     zero times. The site dedups by idempotency key.
//   - Bounded: delivered events are trimmed to keep_delivered; an event
//     that failed max_attempts times is moved to the dead set, kept and
//     counted until an operator retries it; an append that would pass
//     max_pending is refused (the caller retries), never dropped.
//
// Requests are signed (signature.go: X-Hoard-Signature, HMAC-SHA256 over
// the timestamp and body) and bounded by a timeout; failures back off
// exponentially with jitter, up to a cap, and are logged at most once a
// minute with a count (Config.Failures). A request goes only to the
// webhook URL: a redirect is a failed delivery, never followed, and the
// address dialled must be one Policy.Targets allows (no loopback,
// link-local or private address unless the operator allows it).
package outbox
