// Package metrics holds a broker's Prometheus metrics, named after Kafka's
// JMX metrics (kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec
// becomes strata_topic_messages_in_total), and the admin HTTP listener that
// serves them with health checks and pprof.
//
// Counters are updated on the request paths; gauges that describe state
// (partitions, under-replicated partitions, log sizes, consumer lag) are
// computed when Prometheus scrapes, by a collector the broker supplies, so
// the produce and fetch paths pay nothing for them.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Broker is one broker's metrics. Each broker has its own registry, so
// several brokers can run in one process (tests, embedding).
type Broker struct {
	Registry *prometheus.Registry

	// MessagesIn, BytesIn and BytesOut are Kafka's BrokerTopicMetrics
	// MessagesInPerSec, BytesInPerSec and BytesOutPerSec, per topic.
	MessagesIn *prometheus.CounterVec
	BytesIn    *prometheus.CounterVec
	BytesOut   *prometheus.CounterVec
	// FailedProduceRequests and FailedFetchRequests count partitions
	// answered with an error, per topic.
	FailedProduceRequests *prometheus.CounterVec
	FailedFetchRequests   *prometheus.CounterVec

	// Requests, RequestErrors and RequestDuration are Kafka's
	// RequestMetrics RequestsPerSec and TotalTimeMs, per API.
	Requests        *prometheus.CounterVec
	RequestErrors   *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	RequestBytes    *prometheus.CounterVec
	ResponseBytes   *prometheus.CounterVec

	// IsrShrinks and IsrExpands are ReplicaManager's IsrShrinksPerSec and
	// IsrExpandsPerSec.
	IsrShrinks prometheus.Counter
	IsrExpands prometheus.Counter
}

// New returns a broker's metrics, registered with a new registry together
// with the Go runtime and process collectors, and state, the collector of
// the broker's gauges (nil for none).
func New(state prometheus.Collector) *Broker {
	topic := []string{"topic"}
	api := []string{"api"}
	m := &Broker{
		Registry: prometheus.NewRegistry(),
		MessagesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_topic_messages_in_total",
			Help: "Records appended, per topic (Kafka: MessagesInPerSec)."}, topic),
		BytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_topic_bytes_in_total",
			Help: "Record batch bytes appended, per topic (Kafka: BytesInPerSec)."}, topic),
		BytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_topic_bytes_out_total",
			Help: "Record batch bytes sent to consumers, per topic (Kafka: BytesOutPerSec)."}, topic),
		FailedProduceRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_topic_failed_produce_requests_total",
			Help: "Produce requests answered with an error for a partition of the topic (Kafka: FailedProduceRequestsPerSec)."}, topic),
		FailedFetchRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_topic_failed_fetch_requests_total",
			Help: "Fetch requests answered with an error for a partition of the topic (Kafka: FailedFetchRequestsPerSec)."}, topic),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_requests_total",
			Help: "Requests handled, per API (Kafka: RequestsPerSec)."}, api),
		RequestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_request_errors_total",
			Help: "Requests whose response could not be written, per API."}, api),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_request_duration_seconds",
			Help:    "Time from a request's arrival to its response being written, per API (Kafka: TotalTimeMs).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, api),
		RequestBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_request_bytes_total",
			Help: "Request bytes received, per API."}, api),
		ResponseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_response_bytes_total",
			Help: "Response bytes sent, per API."}, api),
		IsrShrinks: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_isr_shrinks_total",
			Help: "Times a partition's in-sync replica set shrank (Kafka: IsrShrinksPerSec)."}),
		IsrExpands: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_isr_expands_total",
			Help: "Times a partition's in-sync replica set grew (Kafka: IsrExpandsPerSec)."}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.MessagesIn, m.BytesIn, m.BytesOut, m.FailedProduceRequests, m.FailedFetchRequests,
		m.Requests, m.RequestErrors, m.RequestDuration, m.RequestBytes, m.ResponseBytes,
		m.IsrShrinks, m.IsrExpands,
	)
	if state != nil {
		m.Registry.MustRegister(state)
	}
	return m
}

// ObserveRequest records one request's trip.
func (m *Broker) ObserveRequest(api string, total time.Duration, requestBytes int, responseBytes int64, failed bool) {
	m.Requests.WithLabelValues(api).Inc()
	m.RequestDuration.WithLabelValues(api).Observe(total.Seconds())
	m.RequestBytes.WithLabelValues(api).Add(float64(requestBytes))
	m.ResponseBytes.WithLabelValues(api).Add(float64(responseBytes))
	if failed {
		m.RequestErrors.WithLabelValues(api).Inc()
	}
}
