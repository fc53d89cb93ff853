package config

import "math"

// Type is a configuration value's type, with Kafka's names (ConfigDef.Type).
type Type int8

// The types a key may have.
const (
	TypeString Type = iota
	TypeInt
	TypeLong
	TypeBool
	TypeList
	TypeDouble
)

// String returns Kafka's name for the type, as DescribeConfigs shows it.
func (t Type) String() string {
	switch t {
	case TypeInt:
		return "INT"
	case TypeLong:
		return "LONG"
	case TypeBool:
		return "BOOLEAN"
	case TypeList:
		return "LIST"
	case TypeDouble:
		return "DOUBLE"
	default:
		return "STRING"
	}
}

// Key describes one configuration key: its Kafka name, type, default and
// what it does. The tables below are the single source of truth: the parser,
// DescribeConfigs and the README's reference are all generated from them.
type Key struct {
	Name    string
	Type    Type
	Default string // "" with HasNoDefault for keys Kafka leaves unset
	Doc     string
	// Min and Max bound numeric values (inclusive) when Min < Max.
	Min, Max float64
	// OneOf lists the accepted values of an enumerated string.
	OneOf []string
	// Topic names the topic-level key this broker key supplies the default
	// for (log.retention.ms supplies retention.ms), or "".
	Topic string
	// Dynamic keys may be changed at run time with AlterConfigs, for one
	// broker (resource name its node id) or cluster-wide (resource name
	// ""): the keys Kafka's DynamicBrokerConfig makes dynamic.
	Dynamic bool
	// PerBroker dynamic keys may be set for one broker only, not
	// cluster-wide (Kafka's listener and security keys).
	PerBroker bool
	// Sensitive keys are never shown in DescribeConfigs.
	Sensitive bool
	// Strata marks keys Kafka does not have.
	Strata bool
	// Check, when set, validates the value further (a list's format).
	Check func(value string) error
}

const (
	maxInt32 = math.MaxInt32
	maxInt64 = math.MaxInt64
)

// ServerKeys are the broker keys Strata reads, with Kafka's names and
// defaults. Keys Kafka has that Strata ignores are in IgnoredServerKeys.
var ServerKeys = []Key{
	{Name: "node.id", Type: TypeInt, Default: "1", Min: 0, Max: maxInt32,
		Doc: "The node's id in the cluster. Kafka has no default; Strata uses 1 so one node starts with no configuration."},
	{Name: "process.roles", Type: TypeList, Default: "broker,controller",
		Doc: "The roles this process plays: broker, controller, or both."},
	{Name: "log.dirs", Type: TypeList, Default: "./strata-data",
		Doc: "The directory holding the partition logs and the metadata log. Strata uses the first entry."},
	{Name: "log.dir", Type: TypeString, Default: "",
		Doc: "Used when log.dirs is not set, as in Kafka."},
	{Name: "listeners", Type: TypeList, Default: "PLAINTEXT://127.0.0.1:9092", Dynamic: true, PerBroker: true,
		Doc: "The addresses the broker listens on, as NAME://host:port. Dynamic as in Kafka with a Raft quorum: set to its current value only."},
	{Name: "advertised.listeners", Type: TypeList, Default: "", Dynamic: true, PerBroker: true,
		Doc: "The addresses given to clients in metadata; the listeners when unset. Dynamic as in Kafka with a Raft quorum: set to its current value only."},
	{Name: "cluster.id", Type: TypeString, Default: "", Strata: true,
		Doc: "The cluster id written to meta.properties on first start; generated when unset (Kafka takes it from kafka-storage format)."},
	{Name: "controller.quorum.voters", Type: TypeList, Default: "",
		Doc: "The controllers, as id@host:port of each one's controller listener. Empty: this node alone (its process.roles must include controller)."},
	{Name: "controller.listener.names", Type: TypeList, Default: "CONTROLLER",
		Doc: "The listeners (in listeners) the controllers use among themselves and brokers use to reach them; the first is used."},
	{Name: "controller.quorum.election.timeout.ms", Type: TypeInt, Default: "1000", Min: 200, Max: maxInt32,
		Doc: "A controller that hears nothing from the quorum's leader for a random time up to this long starts an election."},
	{Name: "controller.quorum.request.timeout.ms", Type: TypeInt, Default: "2000", Min: 1, Max: maxInt32,
		Doc: "How long a broker waits for the active controller to answer before it tries again."},
	{Name: "request.timeout.ms", Type: TypeInt, Default: "30000", Min: 1, Max: maxInt32,
		Doc: "How long a broker waits for the active controller to answer an admin request it forwards that carries no timeout of its own; then it answers NOT_CONTROLLER."},
	{Name: "metadata.log.max.record.bytes.between.snapshots", Type: TypeLong, Default: "20971520", Min: 1, Max: maxInt64,
		Doc: "Metadata record bytes after which the controller snapshots the metadata image and compacts the log behind it."},
	{Name: "inter.broker.listener.name", Type: TypeString, Default: "",
		Doc: "The listener brokers use to reach each other (replication); the first listener that is not a controller listener when unset."},
	{Name: "listener.security.protocol.map", Type: TypeList, Default: "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
		Doc: "The security protocol of each listener name, as NAME:PROTOCOL."},
	{Name: "ssl.keystore.type", Type: TypeString, Default: "JKS", OneOf: []string{"JKS", "PKCS12", "PEM"},
		Doc: "The format of the key store. Strata reads PEM only: set PEM on every SSL or SASL_SSL listener."},
	{Name: "ssl.keystore.location", Type: TypeString, Default: "",
		Doc: "A PEM file holding the listener's private key (PKCS#8, PKCS#1 or SEC 1; or encrypted PKCS#8 with ssl.key.password) and its certificate chain, leaf first. Reread when the file changes."},
	{Name: "ssl.keystore.password", Type: TypeString, Default: "", Sensitive: true,
		Doc: "Not used with PEM key stores (accepted for Kafka compatibility)."},
	{Name: "ssl.key.password", Type: TypeString, Default: "", Sensitive: true,
		Doc: "The password of an encrypted PKCS#8 private key (BEGIN ENCRYPTED PRIVATE KEY: PBES2 with PBKDF2 and AES-CBC or 3DES-CBC, as openssl pkcs8 -topk8 -v2 aes-256-cbc writes), in ssl.keystore.location or ssl.keystore.key. Set exactly when the key is encrypted, as Kafka requires; legacy Proc-Type encrypted PEM is refused."},
	{Name: "ssl.keystore.certificate.chain", Type: TypeString, Default: "",
		Doc: "The certificate chain in PEM, inline, instead of ssl.keystore.location."},
	{Name: "ssl.keystore.key", Type: TypeString, Default: "", Sensitive: true,
		Doc: "The private key in PEM, inline, instead of ssl.keystore.location."},
	{Name: "ssl.truststore.type", Type: TypeString, Default: "JKS", OneOf: []string{"JKS", "PKCS12", "PEM"},
		Doc: "The format of the trust store. Strata reads PEM only."},
	{Name: "ssl.truststore.location", Type: TypeString, Default: "",
		Doc: "A PEM file of the CA certificates that client (and, for inter-broker connections, broker) certificates must chain to; the system's roots when unset."},
	{Name: "ssl.truststore.password", Type: TypeString, Default: "", Sensitive: true,
		Doc: "Not used with PEM trust stores (accepted for Kafka compatibility)."},
	{Name: "ssl.truststore.certificates", Type: TypeString, Default: "",
		Doc: "The trusted CA certificates in PEM, inline, instead of ssl.truststore.location."},
	{Name: "ssl.client.auth", Type: TypeString, Default: "none", OneOf: []string{"none", "requested", "required"},
		Doc: "Whether SSL listeners ask clients for a certificate: required refuses a client without a trusted one, requested checks one if sent. A client's principal is its certificate's subject (see ssl.principal.mapping.rules)."},
	{Name: "ssl.enabled.protocols", Type: TypeList, Default: "TLSv1.2,TLSv1.3", OneOf: []string{"TLSv1.2", "TLSv1.3"},
		Doc: "The TLS versions accepted."},
	{Name: "ssl.protocol", Type: TypeString, Default: "TLSv1.3", OneOf: []string{"TLS", "TLSv1.2", "TLSv1.3"},
		Doc: "The TLS version inter-broker connections prefer; ssl.enabled.protocols bounds what is accepted."},
	{Name: "ssl.cipher.suites", Type: TypeList, Default: "",
		Doc: "TLS 1.2 cipher suites by their IANA names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, ...); Go's secure defaults when unset. TLS 1.3 suites are not configurable."},
	{Name: "ssl.endpoint.identification.algorithm", Type: TypeString, Default: "https",
		Doc: "https checks that a broker's certificate names the host an inter-broker connection dialed; empty skips the check."},
	{Name: "ssl.principal.mapping.rules", Type: TypeString, Default: "DEFAULT",
		Doc: "How a client certificate's subject becomes the principal's name: a comma-separated list of RULE:pattern/replacement/[LU] tried in order, and DEFAULT (the whole distinguished name, RFC 2253)."},
	{Name: "sasl.enabled.mechanisms", Type: TypeList, Default: "GSSAPI",
		Doc: "The SASL mechanisms SASL listeners offer. Strata implements PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; GSSAPI (Kafka's default) and OAUTHBEARER are not, so set this on every SASL listener."},
	{Name: "sasl.mechanism.inter.broker.protocol", Type: TypeString, Default: "GSSAPI",
		Doc: "The mechanism brokers authenticate to each other with when inter.broker.listener.name is a SASL listener; its sasl.jaas.config's username and password are the credentials."},
	{Name: "sasl.mechanism.controller.protocol", Type: TypeString, Default: "GSSAPI",
		Doc: "The mechanism nodes authenticate to the controllers with when the controller listener (controller.listener.names) is a SASL listener; its sasl.jaas.config's username and password are the credentials."},
	{Name: "sasl.jaas.config", Type: TypeString, Default: "", Sensitive: true,
		Doc: "JAAS login module options, usually per listener and mechanism (listener.name.<l>.<mechanism>.sasl.jaas.config). For PLAIN, PlainLoginModule's user_<name>=\"<password>\" options are the users; username and password are what this broker uses to reach others."},
	{Name: "sasl.oauthbearer.jwks.endpoint.url", Type: TypeString, Default: "",
		Doc: "The JSON Web Key Set OAUTHBEARER tokens are verified with: a file (file:///path or a path), reread when it changes, or an https:// endpoint, fetched at start-up and every sasl.oauthbearer.jwks.endpoint.refresh.ms, and early when a token names a key the set lacks. The endpoint's certificate must chain to the ssl.truststore.location (or ssl.truststore.certificates) option of the listener's OAUTHBEARER sasl.jaas.config, PEM, or to the system roots."},
	{Name: "sasl.oauthbearer.jwks.endpoint.refresh.ms", Type: TypeLong, Default: "3600000", Min: 1, Max: maxInt64,
		Doc: "How often an https:// JWKS endpoint is fetched again."},
	{Name: "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", Type: TypeLong, Default: "100", Min: 1, Max: maxInt64,
		Doc: "The wait before retrying a failed JWKS fetch, doubled on each failure up to sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms; also the least time between two fetches brought forward by unknown keys."},
	{Name: "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", Type: TypeLong, Default: "10000", Min: 1, Max: maxInt64,
		Doc: "The longest wait between retries of a failing JWKS fetch."},
	{Name: "sasl.oauthbearer.expected.audience", Type: TypeList, Default: "",
		Doc: "When set, a token's aud must include one of these."},
	{Name: "sasl.oauthbearer.expected.issuer", Type: TypeString, Default: "",
		Doc: "When set, a token's iss must be this."},
	{Name: "sasl.oauthbearer.sub.claim.name", Type: TypeString, Default: "sub",
		Doc: "The token claim that is the principal's name."},
	{Name: "sasl.oauthbearer.clock.skew.seconds", Type: TypeInt, Default: "30", Min: 0, Max: maxInt32,
		Doc: "The clock difference allowed when checking a token's exp, nbf and iat."},
	{Name: "connections.max.reauth.ms", Type: TypeLong, Default: "0", Min: 0, Max: maxInt64,
		Doc: "How long a SASL session lasts before the client must re-authenticate on its connection (KIP-368); 0 never."},
	{Name: "sasl.server.max.receive.size", Type: TypeInt, Default: "524288", Min: 8, Max: maxInt32,
		Doc: "The largest request frame a SASL listener accepts before the client has authenticated."},
	{Name: "connection.failed.authentication.delay.ms", Type: TypeInt, Default: "100", Min: 0, Max: maxInt32,
		Doc: "How long the answer to a failed authentication is held back before the connection closes, to slow down password guessing."},
	{Name: "authorizer.class.name", Type: TypeString, Default: "", OneOf: []string{"", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"},
		Doc: "Turns on authorization: every request is checked against the ACLs in the metadata log, with StandardAuthorizer's rules (both Kafka class names select it). Empty: everything is allowed."},
	{Name: "super.users", Type: TypeString, Default: "",
		Doc: "Principals allowed everything, separated by semicolons: User:admin;User:broker."},
	{Name: "allow.everyone.if.no.acl.found", Type: TypeBool, Default: "false",
		Doc: "Allow an operation on a resource that no ACL names; false denies it."},
	{Name: "broker.heartbeat.interval.ms", Type: TypeInt, Default: "2000", Min: 1, Max: maxInt32,
		Doc: "How often a broker heartbeats to the active controller."},
	{Name: "broker.session.timeout.ms", Type: TypeInt, Default: "9000", Min: 1, Max: maxInt32,
		Doc: "A broker that has not heartbeated for this long is fenced: its partitions get other leaders."},
	{Name: "auto.leader.rebalance.enable", Type: TypeBool, Default: "true",
		Doc: "The active controller moves each partition's leadership back to its preferred replica (the first) when a broker leads too few of the partitions it prefers."},
	{Name: "leader.imbalance.check.interval.seconds", Type: TypeLong, Default: "300", Min: 1, Max: maxInt64,
		Doc: "How often the active controller checks the leaders' balance."},
	{Name: "leader.imbalance.per.broker.percentage", Type: TypeInt, Default: "10", Min: 0, Max: 100,
		Doc: "The share of the partitions a broker prefers that it may not lead before their leaders are moved back to it."},
	{Name: "broker.rack", Type: TypeString, Default: "",
		Doc: "The broker's rack, reported in metadata; rack-aware replica placement and replica.selector.class use it."},
	{Name: "num.partitions", Type: TypeInt, Default: "1", Min: 1, Max: maxInt32,
		Doc: "Partitions of an auto-created topic or a CreateTopics request with -1."},
	{Name: "default.replication.factor", Type: TypeInt, Default: "1", Min: 1, Max: 32767,
		Doc: "Replication factor of auto-created topics and of CreateTopics requests with -1."},
	{Name: "auto.create.topics.enable", Type: TypeBool, Default: "true",
		Doc: "Create a topic when a client asks for its metadata."},
	{Name: "delete.topic.enable", Type: TypeBool, Default: "true",
		Doc: "Allow DeleteTopics."},
	{Name: "message.max.bytes", Type: TypeInt, Default: "1048588", Min: 0, Max: maxInt32, Topic: "max.message.bytes", Dynamic: true,
		Doc: "The largest record batch the broker accepts."},
	{Name: "socket.request.max.bytes", Type: TypeInt, Default: "104857600", Min: 1, Max: maxInt32,
		Doc: "The largest request frame; larger frames close the connection before anything is allocated."},
	{Name: "log.segment.bytes", Type: TypeInt, Default: "1073741824", Min: 14, Max: maxInt32, Topic: "segment.bytes", Dynamic: true,
		Doc: "A segment rolls when it reaches this size."},
	{Name: "log.roll.ms", Type: TypeLong, Default: "", Topic: "segment.ms", Dynamic: true,
		Doc: "A segment rolls when its first record is this old; log.roll.hours when unset."},
	{Name: "log.roll.hours", Type: TypeInt, Default: "168", Min: 1, Max: maxInt32,
		Doc: "A segment rolls when its first record is this old, in hours."},
	{Name: "log.index.size.max.bytes", Type: TypeInt, Default: "10485760", Min: 4, Max: maxInt32, Topic: "segment.index.bytes", Dynamic: true,
		Doc: "The size an offset or time index is preallocated to; a full index rolls the segment."},
	{Name: "log.index.interval.bytes", Type: TypeInt, Default: "4096", Min: 0, Max: maxInt32, Topic: "index.interval.bytes", Dynamic: true,
		Doc: "Bytes of log between two offset-index entries."},
	{Name: "log.retention.ms", Type: TypeLong, Default: "", Topic: "retention.ms", Dynamic: true,
		Doc: "Delete segments older than this; -1 keeps them forever. log.retention.minutes, then log.retention.hours, when unset."},
	{Name: "log.retention.minutes", Type: TypeInt, Default: "", Min: -1, Max: maxInt32,
		Doc: "Retention in minutes, used when log.retention.ms is unset."},
	{Name: "log.retention.hours", Type: TypeInt, Default: "168", Min: -1, Max: maxInt32,
		Doc: "Retention in hours, used when log.retention.ms and log.retention.minutes are unset."},
	{Name: "log.retention.bytes", Type: TypeLong, Default: "-1", Min: -1, Max: maxInt64, Topic: "retention.bytes", Dynamic: true,
		Doc: "Delete the oldest segments while a partition is larger than this; -1 is unlimited."},
	{Name: "log.retention.check.interval.ms", Type: TypeLong, Default: "300000", Min: 1, Max: maxInt64,
		Doc: "How often retention runs."},
	{Name: "log.segment.delete.delay.ms", Type: TypeLong, Default: "60000", Min: 0, Max: maxInt64, Topic: "file.delete.delay.ms", Dynamic: true,
		Doc: "How long a deleted segment's files stay open for reads already under way."},
	{Name: "log.flush.interval.messages", Type: TypeLong, Default: "9223372036854775807", Min: 1, Max: maxInt64, Topic: "flush.messages", Dynamic: true,
		Doc: "Force an fsync after this many messages. 1 makes every acknowledged append durable on disk (Strata group-commits concurrent appends into one fsync)."},
	{Name: "log.flush.interval.ms", Type: TypeLong, Default: "", Topic: "flush.ms", Dynamic: true,
		Doc: "Force an fsync when unflushed data is this old; never when unset."},
	{Name: "num.recovery.threads.per.data.dir", Type: TypeInt, Default: "1", Min: 1, Max: maxInt32, Dynamic: true,
		Doc: "How many partition logs are opened (and recovered after a crash) at once at start-up, and closed at once at shutdown; at most the number of cores is used. A dynamic change applies from the next shutdown: logs open before the metadata log is read."},
	{Name: "log.flush.offset.checkpoint.interval.ms", Type: TypeInt, Default: "60000", Min: 0, Max: maxInt32,
		Doc: "How often the recovery-point checkpoint is written."},
	{Name: "log.message.timestamp.type", Type: TypeString, Default: "CreateTime", OneOf: []string{"CreateTime", "LogAppendTime"}, Topic: "message.timestamp.type", Dynamic: true,
		Doc: "Whether a record's timestamp is the producer's or the broker's append time."},
	{Name: "log.cleanup.policy", Type: TypeList, Default: "delete", OneOf: []string{"delete", "compact"}, Topic: "cleanup.policy", Dynamic: true,
		Doc: "delete (retention) and/or compact (the log cleaner keeps the latest record of each key)."},
	{Name: "log.cleaner.enable", Type: TypeBool, Default: "true",
		Doc: "Run the log cleaner, which compacts topics whose cleanup.policy includes compact."},
	{Name: "log.cleaner.threads", Type: TypeInt, Default: "1", Min: 1, Max: 1024, Dynamic: true,
		Doc: "How many partitions the log cleaner compacts at once."},
	{Name: "log.cleaner.backoff.ms", Type: TypeLong, Default: "15000", Min: 1, Max: maxInt64, Dynamic: true,
		Doc: "How often the log cleaner looks for partitions to compact."},
	{Name: "log.cleaner.dedupe.buffer.size", Type: TypeLong, Default: "134217728", Min: 0, Max: maxInt64, Dynamic: true,
		Doc: "Memory for the log cleaner's offset maps (24 bytes a key, three quarters full at most), shared by its threads."},
	{Name: "log.cleaner.min.cleanable.ratio", Type: TypeDouble, Default: "0.5", Min: 0, Max: 1, Topic: "min.cleanable.dirty.ratio", Dynamic: true,
		Doc: "A partition is compacted once this share of its log was written since the last compaction."},
	{Name: "log.cleaner.delete.retention.ms", Type: TypeLong, Default: "86400000", Min: 0, Max: maxInt64, Topic: "delete.retention.ms", Dynamic: true,
		Doc: "How long a compacted topic keeps a tombstone after the compaction that first kept it."},
	{Name: "log.cleaner.min.compaction.lag.ms", Type: TypeLong, Default: "0", Min: 0, Max: maxInt64, Topic: "min.compaction.lag.ms", Dynamic: true,
		Doc: "A record stays uncompacted for at least this long."},
	{Name: "compression.type", Type: TypeString, Default: "producer", OneOf: []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"}, Topic: "compression.type", Dynamic: true,
		Doc: "Strata stores batches as the producer compressed them; only producer is honoured."},
	{Name: "min.insync.replicas", Type: TypeInt, Default: "1", Min: 1, Max: maxInt32, Topic: "min.insync.replicas", Dynamic: true,
		Doc: "acks=all produces fail with NOT_ENOUGH_REPLICAS when the ISR is smaller."},
	{Name: "unclean.leader.election.enable", Type: TypeBool, Default: "false", Topic: "unclean.leader.election.enable", Dynamic: true,
		Doc: "Allow an out-of-sync replica to become leader, losing data."},
	{Name: "replica.lag.time.max.ms", Type: TypeLong, Default: "30000", Min: 0, Max: maxInt64,
		Doc: "A follower that has not caught up for this long leaves the ISR."},
	{Name: "replica.fetch.max.bytes", Type: TypeInt, Default: "1048576", Min: 0, Max: maxInt32,
		Doc: "Bytes a follower asks for per partition (the first batch comes whole even if larger)."},
	{Name: "replica.fetch.min.bytes", Type: TypeInt, Default: "1", Min: 1, Max: maxInt32,
		Doc: "Bytes a follower's fetch waits for, up to replica.fetch.wait.max.ms."},
	{Name: "replica.fetch.wait.max.ms", Type: TypeInt, Default: "500", Min: 0, Max: maxInt32,
		Doc: "How long a follower's fetch waits at the leader for replica.fetch.min.bytes."},
	{Name: "replica.fetch.response.max.bytes", Type: TypeInt, Default: "10485760", Min: 0, Max: maxInt32,
		Doc: "Bytes in one answer to a follower's fetch, all partitions together."},
	{Name: "replica.fetch.backoff.ms", Type: TypeInt, Default: "1000", Min: 0, Max: maxInt32,
		Doc: "How long a follower waits after a failed fetch."},
	{Name: "replica.socket.timeout.ms", Type: TypeInt, Default: "30000", Min: 1, Max: maxInt32,
		Doc: "How long a follower's request may take beyond replica.fetch.wait.max.ms."},
	{Name: "leader.replication.throttled.rate", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: maxInt64, Dynamic: true,
		Doc: "Bytes per second a leader sends to followers outside the ISR of the replicas leader.replication.throttled.replicas names (a reassignment's new replicas)."},
	{Name: "follower.replication.throttled.rate", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: maxInt64, Dynamic: true,
		Doc: "Bytes per second a follower outside the ISR fetches for the replicas follower.replication.throttled.replicas names."},
	{Name: "replica.selector.class", Type: TypeString, Default: "",
		OneOf: []string{"", "org.apache.kafka.common.replica.LeaderSelector", "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
		Doc:   "How a leader picks the replica a consumer reads from (KIP-392): unset or LeaderSelector, the leader; RackAwareReplicaSelector, a follower in the consumer's client.rack when the leader is in another."},
	{Name: "replica.high.watermark.checkpoint.interval.ms", Type: TypeLong, Default: "5000", Min: 1, Max: maxInt64,
		Doc: "How often the high watermarks are written to replication-offset-checkpoint, where a restarted replica starts from."},
	{Name: "offsets.topic.num.partitions", Type: TypeInt, Default: "50", Min: 1, Max: maxInt32,
		Doc: "Partitions of __consumer_offsets (fixed once the topic exists)."},
	{Name: "offsets.topic.replication.factor", Type: TypeInt, Default: "3", Min: 1, Max: 32767,
		Doc: "Replication factor of __consumer_offsets, capped at the live brokers."},
	{Name: "offsets.topic.segment.bytes", Type: TypeInt, Default: "104857600", Min: 1, Max: maxInt32,
		Doc: "Segment size of __consumer_offsets."},
	{Name: "offsets.retention.minutes", Type: TypeInt, Default: "10080", Min: 1, Max: maxInt32,
		Doc: "Committed offsets of an empty group are removed after this long."},
	{Name: "offsets.retention.check.interval.ms", Type: TypeLong, Default: "600000", Min: 1, Max: maxInt64,
		Doc: "How often expired offsets are removed."},
	{Name: "offset.metadata.max.bytes", Type: TypeInt, Default: "4096", Min: 0, Max: maxInt32,
		Doc: "The longest metadata string an offset commit may carry."},
	{Name: "group.initial.rebalance.delay.ms", Type: TypeInt, Default: "3000", Min: 0, Max: maxInt32,
		Doc: "How long the first rebalance of an empty group waits for more members."},
	{Name: "group.min.session.timeout.ms", Type: TypeInt, Default: "6000", Min: 0, Max: maxInt32,
		Doc: "The smallest session timeout a classic group member may ask for."},
	{Name: "group.max.session.timeout.ms", Type: TypeInt, Default: "1800000", Min: 0, Max: maxInt32,
		Doc: "The largest session timeout a classic group member may ask for."},
	{Name: "group.max.size", Type: TypeInt, Default: "2147483647", Min: 1, Max: maxInt32,
		Doc: "The most members a group may have."},
	{Name: "group.consumer.heartbeat.interval.ms", Type: TypeInt, Default: "5000", Min: 1, Max: maxInt32,
		Doc: "The heartbeat interval given to KIP-848 consumers."},
	{Name: "group.consumer.session.timeout.ms", Type: TypeInt, Default: "45000", Min: 1, Max: maxInt32,
		Doc: "The session timeout of KIP-848 consumers."},
	{Name: "group.consumer.assignors", Type: TypeList, Default: "uniform,range",
		Doc: "Server-side assignors for KIP-848 groups; the first is the default."},
	{Name: "group.coordinator.rebalance.protocols", Type: TypeList, Default: "classic,consumer",
		Doc: "The group protocols enabled; drop consumer to disable KIP-848."},
	{Name: "producer.id.expiration.ms", Type: TypeInt, Default: "86400000", Min: 1, Max: maxInt32, Dynamic: true,
		Doc: "A producer id with no writes for this long is forgotten."},
	{Name: "transactional.id.expiration.ms", Type: TypeInt, Default: "604800000", Min: 1, Max: maxInt32,
		Doc: "A transactional id with no transaction open and no update for this long is forgotten."},
	{Name: "transaction.max.timeout.ms", Type: TypeInt, Default: "900000", Min: 1, Max: maxInt32,
		Doc: "The longest transaction timeout a producer may ask for."},
	{Name: "transaction.state.log.num.partitions", Type: TypeInt, Default: "50", Min: 1, Max: maxInt32,
		Doc: "Partitions of __transaction_state (fixed once the topic exists)."},
	{Name: "transaction.state.log.replication.factor", Type: TypeInt, Default: "3", Min: 1, Max: 32767,
		Doc: "Replication factor of __transaction_state, capped at the live brokers."},
	{Name: "transaction.state.log.min.isr", Type: TypeInt, Default: "2", Min: 1, Max: maxInt32,
		Doc: "min.insync.replicas of __transaction_state, capped at its replication factor."},
	{Name: "transaction.state.log.segment.bytes", Type: TypeInt, Default: "104857600", Min: 1, Max: maxInt32,
		Doc: "Segment size of __transaction_state."},
	{Name: "transaction.abort.timed.out.transaction.cleanup.interval.ms", Type: TypeInt, Default: "10000", Min: 1, Max: maxInt32,
		Doc: "How often transactions past their timeout are aborted."},
	{Name: "transaction.remove.expired.transaction.cleanup.interval.ms", Type: TypeInt, Default: "3600000", Min: 1, Max: maxInt32,
		Doc: "How often expired transactional ids are removed."},
	{Name: "max.incremental.fetch.session.cache.slots", Type: TypeInt, Default: "1000", Min: 0, Max: maxInt32,
		Doc: "Incremental fetch sessions kept per broker; 0 declines every session (full fetches always work)."},
	{Name: "fetch.max.bytes", Type: TypeInt, Default: "57671680", Min: 0, Max: maxInt32,
		Doc: "The most bytes one fetch response carries."},
	{Name: "queued.max.request.bytes", Type: TypeLong, Default: "-1", Min: -1, Max: maxInt64,
		Doc: "The bytes of requests being read, decoded and handled at once, across connections; while they are spent the broker stops reading from sockets. -1 is unbounded."},
	{Name: "max.connections", Type: TypeInt, Default: "2147483647", Min: 0, Max: maxInt32,
		Doc: "The most connections the broker's client listeners hold at once; beyond it new connections wait to be accepted."},
	{Name: "max.connections.per.ip", Type: TypeInt, Default: "2147483647", Min: 0, Max: maxInt32,
		Doc: "The most connections from one IP address; one beyond it is closed at once."},
	{Name: "quota.window.num", Type: TypeInt, Default: "11", Min: 1, Max: maxInt32,
		Doc: "The number of windows a client's byte rate is measured over, for quotas."},
	{Name: "quota.window.size.seconds", Type: TypeInt, Default: "1", Min: 1, Max: maxInt32,
		Doc: "The length of each quota window."},
	{Name: "connections.max.idle.ms", Type: TypeLong, Default: "600000", Min: 0, Max: maxInt64,
		Doc: "Idle connections are closed after this long."},
	{Name: "shutdown.timeout.ms", Type: TypeLong, Default: "10000", Min: 0, Max: maxInt64, Strata: true,
		Doc: "How long a shutdown waits for requests under way before closing connections."},
	{Name: "strata.fetch.zero.copy", Type: TypeBool, Default: "true", Strata: true,
		Doc: "Send fetched records from the page cache with sendfile(2); false copies through user space (for comparison)."},
	{Name: "strata.decompression.budget.bytes", Type: TypeLong, Default: "134217728", Min: 1 << 20, Max: maxInt64, Strata: true,
		Doc: "The memory all decompressions in flight may hold at once (produce validation, compaction, timestamp lookups); more wait their turn."},
	{Name: "strata.decompressed.batch.max.bytes", Type: TypeLong, Default: "67108864", Min: 1 << 20, Max: maxInt64, Strata: true,
		Doc: "The most bytes the records of one compressed batch may decompress to; a batch past it is refused with MESSAGE_TOO_LARGE. Kafka has no such limit; it bounds the work of a decompression bomb. max.message.bytes applies to batches as sent. Keep it below strata.decompression.budget.bytes: the log cleaner decompresses a batch whole within the budget."},
	{Name: "strata.admin.listener", Type: TypeString, Default: "127.0.0.1:9644", Strata: true,
		Doc: "The admin HTTP address (/metrics, /healthz, /readyz, /debug/pprof); empty disables it."},
	{Name: "strata.log.level", Type: TypeString, Default: "info", OneOf: []string{"debug", "info", "warn", "error"}, Strata: true,
		Doc: "The least severe log level written."},
}

// TopicKeys are the topic-level keys, with the broker key each takes its
// default from (Key.Topic on the broker key points back here).
var TopicKeys = []Key{
	{Name: "cleanup.policy", Type: TypeList, Default: "delete", OneOf: []string{"delete", "compact"}, Doc: "delete (retention) and/or compact (keep the latest record of each key; records need keys)."},
	{Name: "compression.type", Type: TypeString, Default: "producer", OneOf: []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"}, Doc: "Only producer is honoured: batches are stored as sent."},
	{Name: "delete.retention.ms", Type: TypeLong, Default: "86400000", Min: 0, Max: maxInt64, Doc: "How long a compacted topic keeps a tombstone after the compaction that first kept it."},
	{Name: "file.delete.delay.ms", Type: TypeLong, Default: "60000", Min: 0, Max: maxInt64, Doc: "How long a deleted segment's files stay open."},
	{Name: "flush.messages", Type: TypeLong, Default: "9223372036854775807", Min: 1, Max: maxInt64, Doc: "Force an fsync after this many messages; 1 fsyncs before every acknowledgement (group commit)."},
	{Name: "flush.ms", Type: TypeLong, Default: "9223372036854775807", Min: 0, Max: maxInt64, Doc: "Force an fsync when unflushed data is this old."},
	{Name: "index.interval.bytes", Type: TypeInt, Default: "4096", Min: 0, Max: maxInt32, Doc: "Bytes of log between two offset-index entries."},
	{Name: "max.message.bytes", Type: TypeInt, Default: "1048588", Min: 0, Max: maxInt32, Doc: "The largest record batch accepted."},
	{Name: "message.timestamp.type", Type: TypeString, Default: "CreateTime", OneOf: []string{"CreateTime", "LogAppendTime"}, Doc: "The producer's timestamp or the broker's append time."},
	{Name: "min.cleanable.dirty.ratio", Type: TypeDouble, Default: "0.5", Min: 0, Max: 1, Doc: "Compact once this share of the log was written since the last compaction."},
	{Name: "min.compaction.lag.ms", Type: TypeLong, Default: "0", Min: 0, Max: maxInt64, Doc: "A record stays uncompacted for at least this long."},
	{Name: "min.insync.replicas", Type: TypeInt, Default: "1", Min: 1, Max: maxInt32, Doc: "The smallest ISR acks=all produces accept."},
	{Name: "retention.bytes", Type: TypeLong, Default: "-1", Min: -1, Max: maxInt64, Doc: "The most bytes a partition keeps; -1 is unlimited."},
	{Name: "retention.ms", Type: TypeLong, Default: "604800000", Min: -1, Max: maxInt64, Doc: "How long records are kept; -1 is forever."},
	{Name: "segment.bytes", Type: TypeInt, Default: "1073741824", Min: 14, Max: maxInt32, Doc: "A segment rolls at this size."},
	{Name: "segment.index.bytes", Type: TypeInt, Default: "10485760", Min: 4, Max: maxInt32, Doc: "Index files are preallocated to this size."},
	{Name: "segment.ms", Type: TypeLong, Default: "604800000", Min: 1, Max: maxInt64, Doc: "A segment rolls when its first record is this old."},
	{Name: "leader.replication.throttled.replicas", Type: TypeList, Default: "", Check: checkThrottledReplicas,
		Doc: "Replicas, as partition:broker pairs or * for all, whose leader sends to followers outside the ISR at most leader.replication.throttled.rate."},
	{Name: "follower.replication.throttled.replicas", Type: TypeList, Default: "", Check: checkThrottledReplicas,
		Doc: "Replicas, as partition:broker pairs or * for all, that fetch while outside the ISR at most follower.replication.throttled.rate."},
	{Name: "unclean.leader.election.enable", Type: TypeBool, Default: "false", Doc: "Allow an out-of-sync replica to become leader."},
}

// IgnoredServerKeys are Kafka broker keys Strata accepts without warning
// but does not act on, because its design makes them moot (one process, no
// JVM, no ZooKeeper).
var IgnoredServerKeys = map[string]string{
	"num.network.threads":                 "Go schedules connections itself",
	"num.io.threads":                      "Go schedules requests itself",
	"num.replica.fetchers":                "one fetcher per source broker",
	"socket.send.buffer.bytes":            "the kernel's autotuning is used",
	"socket.receive.buffer.bytes":         "the kernel's autotuning is used",
	"zookeeper.connect":                   "there is no ZooKeeper",
	"offsets.topic.min.isr":               "min.insync.replicas applies",
	"controller.quorum.bootstrap.servers": "the controller quorum is single-node for now",
	"group.coordinator.new.enable":        "the coordinator always runs",
	"log.preallocate":                     "segments grow as written",
}
