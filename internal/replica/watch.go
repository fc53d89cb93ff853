package replica

// Watch registers ch to receive a value, without blocking, when the
// partition next has something new to read. One channel (buffered,
// capacity 1) may watch many partitions: a long-polling fetch waits on one
// channel for all of its partitions. Unwatch must follow, or the partition
// keeps ch until the next change.
func (p *Partition) Watch(ch chan<- struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watchers[ch] = struct{}{}
}

// Unwatch removes ch.
func (p *Partition) Unwatch(ch chan<- struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.watchers, ch)
}

// Watched reports whether anything waits for the partition to change.
func (p *Partition) Watched() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watchers) > 0
}

// wakeLocked signals and forgets every watcher. p.mu must be held.
func (p *Partition) wakeLocked() {
	for ch := range p.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
		delete(p.watchers, ch)
	}
}
