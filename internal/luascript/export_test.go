package luascript

// Queued is how many calls wait for a batch, for tests that hold one.
func (b *Batcher) Queued() int { return b.batches.Waiting() }
