package queues

import "sync"

// warriorKeyCache keeps, per project, the key names of claim.lua and
// done.lua that depend only on the project. A warrior round trip built
// some forty key names by concatenation (4% of hoard serve's CPU in a
// warrior-path profile); now it copies one slice and builds four. The
// lists are read-only once stored: callers copy before filling in.
//
// Slugs come from requests, and a request for a project that does not
// exist still gets here (the script says so), so the cache is bounded:
// when it holds warriorKeyCacheMax projects it starts over.
type warriorKeyCache struct {
	mu      sync.Mutex
	entries map[string]*warriorKeys
}

const warriorKeyCacheMax = 1024

type warriorKeys struct {
	claim     []string // claimProjectKeys
	claimTail []string // claimTailKeys
	done      []string // doneKeys
	plain     []string // claimPlainKeys
	donePlain []string // donePlainKeys
}

func (c *warriorKeyCache) get(slug string) *warriorKeys {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.entries[slug]; ok {
		return k
	}
	if c.entries == nil || len(c.entries) >= warriorKeyCacheMax {
		c.entries = make(map[string]*warriorKeys)
	}
	k := &warriorKeys{claim: claimProjectKeys(slug), claimTail: claimTailKeys(slug), done: doneKeys(slug),
		plain: claimPlainKeys(slug), donePlain: donePlainKeys(slug)}
	c.entries[slug] = k
	return k
}
