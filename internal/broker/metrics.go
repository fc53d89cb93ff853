package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/txn"
	"github.com/strata-io/strata/internal/wire"
)

// stateCollector computes the broker's gauges when Prometheus scrapes:
// partition and leader counts, under-replicated, under-min-ISR and offline
// partitions, the active controller count, log sizes, the replica
// fetchers' lag and consumer lag.
type stateCollector struct{ b *Broker }

var (
	descPartitions       = prometheus.NewDesc("strata_partitions", "Partitions hosted on this broker (Kafka: PartitionCount).", nil, nil)
	descLeaders          = prometheus.NewDesc("strata_leader_partitions", "Partitions this broker leads (Kafka: LeaderCount).", nil, nil)
	descUnderReplicated  = prometheus.NewDesc("strata_under_replicated_partitions", "Partitions led here whose ISR is smaller than their replica set (Kafka: UnderReplicatedPartitions).", nil, nil)
	descUnderMinISR      = prometheus.NewDesc("strata_under_min_isr_partitions", "Partitions led here whose ISR is smaller than min.insync.replicas (Kafka: UnderMinIsrPartitionCount).", nil, nil)
	descOffline          = prometheus.NewDesc("strata_offline_partitions", "Partitions in the cluster without a leader (Kafka: OfflinePartitionsCount).", nil, nil)
	descActiveController = prometheus.NewDesc("strata_active_controller_count", "1 on the node that is the active controller (Kafka: ActiveControllerCount).", nil, nil)
	descQuorumLeader     = prometheus.NewDesc("strata_metadata_quorum_leader", "The metadata quorum's leader as this node knows it, -1 for none (Kafka: raft-metrics current-leader).", nil, nil)
	descQuorumTerm       = prometheus.NewDesc("strata_metadata_quorum_term", "The metadata quorum's term, KRaft's epoch (Kafka: raft-metrics current-epoch).", nil, nil)
	descMetadataOffset   = prometheus.NewDesc("strata_metadata_applied_offset", "The offset of the metadata image this node acts on (Kafka: MetadataLoader CurrentMetadataOffset).", nil, nil)
	descFencedBrokers    = prometheus.NewDesc("strata_fenced_brokers", "Registered brokers that are fenced (Kafka: FencedBrokerCount).", nil, nil)
	descActiveBrokers    = prometheus.NewDesc("strata_active_brokers", "Registered brokers that are not fenced (Kafka: ActiveBrokerCount).", nil, nil)
	descLogSize          = prometheus.NewDesc("strata_log_size_bytes", "Bytes of log on disk per partition (Kafka: Log Size).", []string{"topic", "partition"}, nil)
	descLogEnd           = prometheus.NewDesc("strata_log_end_offset", "Log end offset per partition (Kafka: LogEndOffset).", []string{"topic", "partition"}, nil)
	descLogStart         = prometheus.NewDesc("strata_log_start_offset", "Log start offset per partition (Kafka: LogStartOffset).", []string{"topic", "partition"}, nil)
	descFetcherLag       = prometheus.NewDesc("strata_replica_fetcher_lag", "Records a partition followed here is behind the high watermark its leader last sent (Kafka: FetcherLagMetrics ConsumerLag).", []string{"topic", "partition"}, nil)
	descFetcherMaxLag    = prometheus.NewDesc("strata_replica_fetcher_max_lag", "The largest lag, in records, over the partitions followed here (Kafka: ReplicaFetcherManager MaxLag).", nil, nil)
	descThrottleRate     = prometheus.NewDesc("strata_replication_throttle_byte_rate", "Bytes per second of throttled replication, as the throttle measures it (Kafka: LeaderReplication and FollowerReplication byte-rate).", []string{"side"}, nil)
	descThrottleHeld     = prometheus.NewDesc("strata_replication_throttled_reads_total", "Partition reads a replication throttle held back, on the leader's side or the follower's.", []string{"side"}, nil)
	descGroupLag         = prometheus.NewDesc("strata_consumer_group_lag", "Records between a group's committed offset and the high watermark.", []string{"group", "topic", "partition"}, nil)
	descGroupLagSeconds  = prometheus.NewDesc("strata_consumer_group_lag_seconds", "Age of the oldest record a group has not committed past (0 when caught up).", []string{"group", "topic", "partition"}, nil)
	descOpenTxns         = prometheus.NewDesc("strata_transactions_open", "Transactions coordinated here that are open or completing, by state (Ongoing, PrepareCommit, PrepareAbort).", []string{"state"}, nil)
	descOldestTxnAge     = prometheus.NewDesc("strata_transaction_oldest_open_age_seconds", "Age of the oldest open transaction coordinated here (0 when none).", nil, nil)
	descQuotaThrottles   = prometheus.NewDesc("strata_quota_throttles_total", "Responses throttled, and connections refused, for a client quota, by quota (Kafka: the quota managers' throttle-time sensors).", []string{"quota"}, nil)
	descQuotaThrottled   = prometheus.NewDesc("strata_quota_throttle_seconds_total", "The total of the throttles answered for a client quota, by quota.", []string{"quota"}, nil)
	descLastStableLag    = prometheus.NewDesc("strata_last_stable_offset_lag", "Records between a partition's last stable offset and its high watermark: what open transactions hold back from read_committed consumers.", []string{"topic", "partition"}, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPartitions, descLeaders, descUnderReplicated, descUnderMinISR, descOffline,
		descActiveController, descQuorumLeader, descQuorumTerm, descMetadataOffset, descFencedBrokers, descActiveBrokers, descLogSize, descLogEnd, descLogStart, descFetcherLag, descFetcherMaxLag, descThrottleRate, descThrottleHeld, descGroupLag, descGroupLagSeconds, descOpenTxns, descOldestTxnAge, descLastStableLag, descQuotaThrottles, descQuotaThrottled} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	img := b.image.Load()
	if img == nil {
		return
	}
	// Offline partitions are the metadata's view (Kafka's controller
	// reports them); the others are the replicas' own, as Kafka's
	// ReplicaManager reports them: a leader's ISR may be newer than the
	// image.
	var hosted, leaders, under, underMin, offline int
	for _, t := range img.Topics {
		for i := range t.Partitions {
			if t.Partitions[i].Leader < 0 {
				offline++
			}
		}
	}
	now := b.now()
	var maxLag int64
	b.partitionsMu.RLock()
	hosted = len(b.partitions)
	for key, p := range b.partitions {
		part := itoa(key.partition)
		stats := p.Stats()
		ch <- prometheus.MustNewConstMetric(descLogSize, prometheus.GaugeValue, float64(stats.Size), key.topic, part)
		ch <- prometheus.MustNewConstMetric(descLogEnd, prometheus.GaugeValue, float64(stats.LogEndOffset), key.topic, part)
		ch <- prometheus.MustNewConstMetric(descLogStart, prometheus.GaugeValue, float64(stats.LogStartOffset), key.topic, part)
		r := p.Replication()
		if r.Leader {
			leaders++
		}
		if r.UnderReplicated() {
			under++
		}
		if r.UnderMinISR() {
			underMin++
		}
		if r.Leader {
			ch <- prometheus.MustNewConstMetric(descLastStableLag, prometheus.GaugeValue, float64(p.HighWatermark()-p.LastStableOffset()), key.topic, part)
		}
		if r.FetcherLag >= 0 {
			ch <- prometheus.MustNewConstMetric(descFetcherLag, prometheus.GaugeValue, float64(r.FetcherLag), key.topic, part)
			maxLag = max(maxLag, r.FetcherLag)
		}
	}
	b.partitionsMu.RUnlock()
	ch <- prometheus.MustNewConstMetric(descFetcherMaxLag, prometheus.GaugeValue, float64(maxLag))
	for side, q := range map[string]*replica.Quota{"leader": b.leaderQuota, "follower": b.followerQuota} {
		ch <- prometheus.MustNewConstMetric(descThrottleRate, prometheus.GaugeValue, q.Rate(now), side)
		ch <- prometheus.MustNewConstMetric(descThrottleHeld, prometheus.CounterValue, float64(q.HeldBack()), side)
	}
	for key, th := range b.quotas.Throttled() {
		ch <- prometheus.MustNewConstMetric(descQuotaThrottles, prometheus.CounterValue, float64(th.Count), key)
		ch <- prometheus.MustNewConstMetric(descQuotaThrottled, prometheus.CounterValue, th.Total.Seconds(), key)
	}
	ch <- prometheus.MustNewConstMetric(descPartitions, prometheus.GaugeValue, float64(hosted))
	ch <- prometheus.MustNewConstMetric(descLeaders, prometheus.GaugeValue, float64(leaders))
	ch <- prometheus.MustNewConstMetric(descUnderReplicated, prometheus.GaugeValue, float64(under))
	ch <- prometheus.MustNewConstMetric(descUnderMinISR, prometheus.GaugeValue, float64(underMin))
	ch <- prometheus.MustNewConstMetric(descOffline, prometheus.GaugeValue, float64(offline))
	active, leader, term := 0.0, -1.0, 0.0
	if b.controller != nil {
		l, a, t := b.controller.Quorum()
		leader, term = float64(l), float64(t)
		if a {
			active = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(descActiveController, prometheus.GaugeValue, active)
	ch <- prometheus.MustNewConstMetric(descQuorumLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descQuorumTerm, prometheus.GaugeValue, term)
	if img := b.image.Load(); img != nil {
		fenced := 0
		for _, br := range img.Brokers {
			if br.Fenced {
				fenced++
			}
		}
		ch <- prometheus.MustNewConstMetric(descMetadataOffset, prometheus.GaugeValue, float64(img.Offset))
		ch <- prometheus.MustNewConstMetric(descFencedBrokers, prometheus.GaugeValue, float64(fenced))
		ch <- prometheus.MustNewConstMetric(descActiveBrokers, prometheus.GaugeValue, float64(len(img.Brokers)-fenced))
	}

	c.collectTransactions(ch, now)

	for _, g := range b.groups.GroupOffsets() {
		for _, o := range g.Offsets {
			p, ok := b.partition(o.Topic, o.Partition)
			if !ok {
				continue
			}
			hw := p.HighWatermark()
			lag := max(hw-o.Offset, 0)
			part := itoa(o.Partition)
			ch <- prometheus.MustNewConstMetric(descGroupLag, prometheus.GaugeValue, float64(lag), g.Group, o.Topic, part)
			seconds := 0.0
			if lag > 0 {
				// The batch holding the committed offset holds the oldest
				// record not yet consumed.
				if ts, ok := p.BatchTimestamp(o.Offset); ok {
					seconds = max(now.Sub(time.UnixMilli(ts)).Seconds(), 0)
				}
			}
			ch <- prometheus.MustNewConstMetric(descGroupLagSeconds, prometheus.GaugeValue, seconds, g.Group, o.Topic, part)
		}
	}
}

// countISRChange counts an ISR change a partition led here committed.
func (b *Broker) countISRChange(shrink bool) {
	if shrink {
		b.metrics.IsrShrinks.Inc()
	} else {
		b.metrics.IsrExpands.Inc()
	}
}

// observe feeds the wire layer's per-request observations to the metrics.
func (b *Broker) observe(o wire.Observation) {
	b.metrics.ObserveRequest(apiName(o.Key), o.TotalTime, o.RequestBytes, o.ResponseBytes, o.Err != nil)
}

var apiNames = func() map[int16]string {
	m := map[int16]string{}
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		m[key] = kmsg.NameForKey(key)
	}
	return m
}()

func apiName(key int16) string {
	if n, ok := apiNames[key]; ok && n != "" {
		return n
	}
	return "Unknown"
}

// collectTransactions reports the transactions this broker coordinates
// that are not complete.
func (c stateCollector) collectTransactions(ch chan<- prometheus.Metric, now time.Time) {
	all, _ := c.b.txns.List()
	counts := map[txn.State]int{txn.Ongoing: 0, txn.PrepareCommit: 0, txn.PrepareAbort: 0}
	oldest := 0.0
	for _, md := range all {
		if _, open := counts[md.State]; !open {
			continue
		}
		counts[md.State]++
		if md.StartMs >= 0 {
			oldest = max(oldest, now.Sub(time.UnixMilli(md.StartMs)).Seconds())
		}
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(descOpenTxns, prometheus.GaugeValue, float64(n), st.String())
	}
	ch <- prometheus.MustNewConstMetric(descOldestTxnAge, prometheus.GaugeValue, oldest)
}
