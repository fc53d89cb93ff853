package replica

import "time"

// alterPartitionBackoff is the pause before an ISR change the controller
// did not answer is sent again.
const alterPartitionBackoff = 500 * time.Millisecond

// applyLocked carries out a tracker event's effects: it publishes the high
// watermark and wakes long polls, answers waiting produces, and sends ISR
// changes to the controller on their own goroutine. Nothing here blocks.
// p.mu must be held.
func (p *Partition) applyLocked(eff effects) {
	if eff.highWatermarkMoved {
		hw := p.tracker.highWatermark
		p.highWatermark.Store(hw)
		// Checkpointed for a restart; retention and compaction stay below
		// it, as in Kafka.
		p.log.SetHighWatermark(hw)
		p.wakeLocked()
	}
	for _, a := range eff.acks {
		if ch, ok := p.ackWaiters[a.id]; ok {
			ch <- a.err // buffered: never blocks
			delete(p.ackWaiters, a.id)
		}
	}
	if eff.propose != nil {
		go p.alterPartition(eff.propose)
	}
	if eff.committed != nil && p.opts.ISRChanged != nil {
		p.opts.ISRChanged(eff.committed.Shrink)
	}
}

// alterPartition sends change to the controller, and again after a pause
// for as long as the tracker asks to retry it.
func (p *Partition) alterPartition(change *ISRChange) {
	if p.opts.AlterPartition == nil {
		p.opts.Logger.Warn("ISR change left in flight: no controller to send it to",
			"topic", p.Topic, "partition", p.Index, "change", change.String())
		return
	}
	ctx := p.opts.Context
	for {
		epoch, err := p.opts.AlterPartition(ctx, p.Topic, p.Index, *change)
		if err != nil {
			p.opts.Logger.Info("ISR change not committed", "topic", p.Topic, "partition", p.Index, "change", change.String(), "err", err)
		} else {
			p.opts.Logger.Info("ISR changed", "topic", p.Topic, "partition", p.Index, "isr", change.ISR, "partition_epoch", epoch)
		}
		p.mu.Lock()
		eff := p.tracker.alterPartitionDone(change, epoch, err, p.nowMs())
		retry := eff.propose == change
		eff.propose = nil
		p.applyLocked(eff)
		p.mu.Unlock()
		if !retry {
			return
		}
		t := time.NewTimer(alterPartitionBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
