package group

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// Errors returned while loading a partition. Both make Load give up on the
// partition: requests for its groups get NOT_COORDINATOR.
var (
	// ErrCorruptRecord is returned when a batch or a record in it does not
	// decode: a bad CRC, a record running past its batch, or a key or value
	// kmsg cannot read.
	ErrCorruptRecord = errors.New("group: corrupt __consumer_offsets record")
	// ErrCompressedBatch is returned for a compressed batch; this package
	// writes none and cannot read one yet.
	ErrCompressedBatch = errors.New("group: compressed __consumer_offsets batch")
)

// Record key versions: the int16 every __consumer_offsets key starts with
// says what the record is (Kafka's CoordinatorRecordType).
const (
	keyOffsetCommitV0  = 0
	keyOffsetCommitV1  = 1
	keyGroupMetadataV2 = 2
)

// groupTypeTag marks a GroupMetadataValue as describing a KIP-848 group
// rather than a classic one. Tagged fields Kafka does not know are skipped by
// its readers, so a Kafka broker replaying the partition would see an empty
// classic group; there is no kmsg codec for Kafka's own ConsumerGroup*
// records.
const groupTypeTag uint32 = 0x53545241 // "STRA"

var consumerTypeTagValue = []byte(groupTypeConsumer)

// kv is one record: a key and a value, nil for a tombstone.
type kv struct {
	key   []byte
	value []byte
}

// decodeBatch calls fn with each record of batch, which must hold exactly
// one batch; transactional and control batches (TxnOffsetCommit's records
// and the markers deciding them) go to txn whole instead. The slices fn
// receives alias batch.
func decodeBatch(batch []byte, fn func(key, value []byte) error, txn func(h record.Header, batch []byte) error) error {
	h, err := record.Validate(batch, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	if h.IsControl() || h.IsTransactional() {
		return txn(h, batch)
	}
	return decodeRecords(batch, h, fn)
}

// decodeRecords calls fn with each record of a validated batch.
func decodeRecords(batch []byte, h record.Header, fn func(key, value []byte) error) error {
	if h.Codec() != record.CodecNone {
		return fmt.Errorf("%w: codec %d at offset %d", ErrCompressedBatch, h.Codec(), h.BaseOffset)
	}
	recs := batch[record.HeaderSize:h.Size()]
	for i := int32(0); i < h.NumRecords; i++ {
		l, n := binary.Varint(recs)
		if n <= 0 || l < 0 || l > int64(len(recs)-n) {
			return fmt.Errorf("%w: record %d of batch at offset %d overruns it", ErrCorruptRecord, i, h.BaseOffset)
		}
		var r kmsg.Record
		if err := r.ReadFrom(recs[:n+int(l)]); err != nil {
			return fmt.Errorf("%w: record %d of batch at offset %d: %w", ErrCorruptRecord, i, h.BaseOffset, err)
		}
		if err := fn(r.Key, r.Value); err != nil {
			return err
		}
		recs = recs[n+int(l):]
	}
	return nil
}

func offsetKey(group, topic string, partition int32) []byte {
	k := kmsg.OffsetCommitKey{Version: keyOffsetCommitV1, Group: group, Topic: topic, Partition: partition}
	return k.AppendTo(nil)
}

func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: keyGroupMetadataV2, Group: group}
	return k.AppendTo(nil)
}

// offsetRecord is Kafka's newOffsetCommitRecord: value v1 when the commit
// carried its own retention (OffsetCommit v2-v4), v3 otherwise.
func offsetRecord(group, topic string, partition int32, o offsetAndMetadata) kv {
	v := kmsg.OffsetCommitValue{
		Version:         3,
		Offset:          o.offset,
		LeaderEpoch:     o.leaderEpoch,
		Metadata:        o.metadata,
		CommitTimestamp: o.commitTimestamp,
	}
	if o.expireTimestamp >= 0 {
		v.Version = 1
		v.ExpireTimestamp = o.expireTimestamp
	}
	return kv{offsetKey(group, topic, partition), v.AppendTo(nil)}
}

func offsetTombstone(group, topic string, partition int32) kv {
	return kv{offsetKey(group, topic, partition), nil}
}

func groupTombstone(group string) kv {
	return kv{groupKey(group), nil}
}

// classicGroupRecord is Kafka's newGroupMetadataRecord: the group's
// generation with every member's subscription (its metadata for the chosen
// protocol) and the given assignment.
func classicGroupRecord(g *classicGroup, assignment map[string][]byte) kv {
	v := kmsg.NewGroupMetadataValue()
	v.Version = 3
	v.ProtocolType = g.protocolType
	v.Generation = g.generation
	if g.protocolName != "" {
		v.Protocol = kmsg.StringPtr(g.protocolName)
	}
	if g.leader != "" {
		v.Leader = kmsg.StringPtr(g.leader)
	}
	v.CurrentStateTimestamp = g.stateTimestamp
	for _, id := range g.sortedMemberIDs() {
		m := g.members[id]
		mv := kmsg.NewGroupMetadataValueMember()
		mv.MemberID = m.id
		mv.InstanceID = m.instanceID
		mv.ClientID = m.clientID
		mv.ClientHost = m.clientHost
		mv.RebalanceTimeoutMillis = m.rebalanceTimeoutMs
		mv.SessionTimeoutMillis = m.sessionTimeoutMs
		mv.Subscription = m.metadata(g.protocolName)
		mv.Assignment = assignment[m.id]
		if mv.Assignment == nil {
			mv.Assignment = []byte{}
		}
		v.Members = append(v.Members, mv)
	}
	return kv{groupKey(g.id), v.AppendTo(nil)}
}

// emptyClassicGroupRecord is Kafka's newEmptyGroupMetadataRecord, written
// when a join creates a group.
func emptyClassicGroupRecord(g *classicGroup) kv {
	v := kmsg.NewGroupMetadataValue()
	v.Version = 3
	v.CurrentStateTimestamp = g.stateTimestamp
	return kv{groupKey(g.id), v.AppendTo(nil)}
}

// consumerGroupRecord records that a KIP-848 group exists at its group epoch.
func consumerGroupRecord(g *consumerGroup, now time.Time) kv {
	v := kmsg.NewGroupMetadataValue()
	v.Version = 4
	v.ProtocolType = "consumer"
	v.Generation = g.groupEpoch
	v.CurrentStateTimestamp = now.UnixMilli()
	v.UnknownTags.Set(groupTypeTag, consumerTypeTagValue)
	return kv{groupKey(g.id), v.AppendTo(nil)}
}

// isConsumerGroupValue reports whether v carries the KIP-848 group marker.
func isConsumerGroupValue(v *kmsg.GroupMetadataValue) bool {
	found := false
	v.UnknownTags.Each(func(tag uint32, val []byte) {
		if tag == groupTypeTag && bytes.Equal(val, consumerTypeTagValue) {
			found = true
		}
	})
	return found
}

// replayRecord applies one record to the shard's state: Kafka's
// GroupCoordinatorShard.replay. Records with other key types (Kafka's
// KIP-848, share and streams records) are ignored.
// decodeOffsetRecord decodes an offset commit record; ok is false for a
// record of another kind or a tombstone.
func decodeOffsetRecord(key, value []byte) (groupID, topic string, partition int32, o offsetAndMetadata, ok bool, err error) {
	if len(key) < 2 {
		return "", "", 0, o, false, fmt.Errorf("%w: key of %d bytes", ErrCorruptRecord, len(key))
	}
	if v := int16(binary.BigEndian.Uint16(key)); (v != keyOffsetCommitV0 && v != keyOffsetCommitV1) || value == nil {
		return "", "", 0, o, false, nil
	}
	var k kmsg.OffsetCommitKey
	if err := k.ReadFrom(key); err != nil {
		return "", "", 0, o, false, fmt.Errorf("%w: offset commit key: %w", ErrCorruptRecord, err)
	}
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(value); err != nil {
		return "", "", 0, o, false, fmt.Errorf("%w: offset commit value: %w", ErrCorruptRecord, err)
	}
	return k.Group, k.Topic, k.Partition, offsetFromValue(&v), true, nil
}

func (st *data) replayRecord(key, value []byte, now time.Time) error {
	if len(key) < 2 {
		return fmt.Errorf("%w: key of %d bytes", ErrCorruptRecord, len(key))
	}
	switch version := int16(binary.BigEndian.Uint16(key)); version {
	case keyOffsetCommitV0, keyOffsetCommitV1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(key); err != nil {
			return fmt.Errorf("%w: offset commit key: %w", ErrCorruptRecord, err)
		}
		if value == nil {
			st.removeOffset(k.Group, k.Topic, k.Partition)
			return nil
		}
		var v kmsg.OffsetCommitValue
		if err := v.ReadFrom(value); err != nil {
			return fmt.Errorf("%w: offset commit value: %w", ErrCorruptRecord, err)
		}
		st.replayOffset(k.Group, k.Topic, k.Partition, offsetFromValue(&v), now)
	case keyGroupMetadataV2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(key); err != nil {
			return fmt.Errorf("%w: group metadata key: %w", ErrCorruptRecord, err)
		}
		if value == nil {
			delete(st.groups, k.Group)
			return nil
		}
		var v kmsg.GroupMetadataValue
		if err := v.ReadFrom(value); err != nil {
			return fmt.Errorf("%w: group metadata value: %w", ErrCorruptRecord, err)
		}
		if isConsumerGroupValue(&v) {
			cg := newConsumerGroup(k.Group)
			cg.groupEpoch = v.Generation
			cg.assignmentEpoch = v.Generation
			st.groups[k.Group] = &group{consumer: cg}
			return nil
		}
		st.groups[k.Group] = &group{classic: classicGroupFromValue(k.Group, &v, now)}
	}
	return nil
}

func offsetFromValue(v *kmsg.OffsetCommitValue) offsetAndMetadata {
	o := offsetAndMetadata{
		offset:          v.Offset,
		leaderEpoch:     -1,
		metadata:        v.Metadata,
		commitTimestamp: v.CommitTimestamp,
		expireTimestamp: -1,
	}
	if v.Version >= 3 {
		o.leaderEpoch = v.LeaderEpoch
	}
	if v.Version == 1 {
		o.expireTimestamp = v.ExpireTimestamp
	}
	return o
}
