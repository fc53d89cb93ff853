// Package broker answers the Kafka protocol: one file per API, each small,
// calling into the replica, group, producer and controller packages where
// the logic lives. It implements wire.Handler.
//
// Each API's file registers everything about it in one descriptor (api,
// handle.go): its key and versions, its handler, its authorization rule,
// how to answer every part of a request with one error (authorization
// refusals, and NOT_CONTROLLER when a forwarded request finds no
// controller), whether clients' requests for it are forwarded to the
// active controller, and how client quotas count it. TestAPIDescriptors
// fails for an advertised API whose descriptor misses a part.
//
// The broker follows the committed metadata image: when the image changes
// it opens, leads, reconfigures or deletes the partitions it hosts
// (applyImage). Request handlers read the image through an atomic pointer
// and the partition registry through Broker.partitionsMu.
//
// Lock order: Broker.imageMu (held while applying an image), then
// Broker.partitionsMu, then anything in replica. Handlers take only
// partitionsMu, briefly.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/datadir"
	"github.com/strata-io/strata/internal/group"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/metrics"
	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/quota"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/txn"
	"github.com/strata-io/strata/internal/vfs"
	"github.com/strata-io/strata/internal/wire"
)

// Options configure a Broker.
type Options struct {
	Config *config.Server
	Logger *slog.Logger
	// FS is the file system the logs live on; vfs.Default when nil.
	FS vfs.FS
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Dial connects to another node: the metadata quorum's peers, the
	// active controller and the leaders this broker's replicas follow.
	// (&net.Dialer{}).DialContext when nil; the in-process cluster puts a
	// dialer here that can cut nodes apart.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// Broker is one Strata node: the broker and, on a single node, the
// controller.
type Broker struct {
	cfg    *config.Server
	nodeID int32
	logger *slog.Logger
	fs     vfs.FS
	now    func() time.Time
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	dir    string

	logs       *storage.Manager
	controller *controller.Controller
	quorum     *quorum.Node
	// raft is quorum for the controller listener's goroutines, which run
	// before it is open.
	raft atomic.Pointer[quorum.Node]
	// observer follows the metadata on a node that is not a controller
	// (process.roles=broker); nil on voters.
	observer *quorum.Observer
	ctrl     *controllerClient
	cluster  config.Cluster
	// incarnation identifies this process to the controller; brokerEpoch
	// is the epoch of its registration; fenced whether the controller
	// last said it is fenced.
	incarnation metadata.UUID
	brokerEpoch atomic.Int64
	fenced      atomic.Bool
	// logDirFailed is set once a log went offline with an I/O error:
	// heartbeats ask to be fenced from then on.
	logDirFailed atomic.Bool
	// failedCh is closed once the controller fenced this broker for its
	// failed log directory (Failed).
	failedCh chan struct{}
	failOnce sync.Once
	// controllerListener serves the controller listener's Kafka side;
	// nil when this node has none.
	controllerServer   *wire.Server
	controllerListener net.Listener
	// controllerBL is the controller listener's security, as served;
	// controllerSec how this node dials the controllers (nil alone).
	controllerBL  *brokerListener
	controllerSec *controllerSecurity

	server   *wire.Server
	versions map[int16]wire.VersionRange

	image   atomic.Pointer[metadata.Image]
	imageMu sync.Mutex // serializes applyImage
	// imageNext is closed when the next image is stored (awaitImage).
	imageNextMu sync.Mutex
	imageNext   chan struct{}
	settings    atomic.Pointer[settings] // the broker keys in effect; see settings
	// leaderQuota and followerQuota are the replication throttles
	// (leader. and follower.replication.throttled.rate).
	leaderQuota, followerQuota *replica.Quota

	partitionsMu sync.RWMutex
	partitions   map[tp]*replica.Partition

	// isr commits ISR changes (AlterPartition) for the partitions led
	// here; nil until the controller implements it (a single node's ISR
	// never changes).
	isr partitionAlterer
	// fetchers replicate the partitions this broker follows.
	fetchers *replicaFetchers

	producerIDs   *producer.IDAllocator
	fetchSessions *fetchSessions
	groups        *group.Coordinator
	txns          *txn.Coordinator
	txnMarkers    *markerWriter
	metrics       *metrics.Broker
	admin         *metrics.AdminServer

	// listeners are the bound client listeners, the client listener
	// first; interBrokerListener is the one of inter.broker.listener.name.
	listeners           []*brokerListener
	interBrokerListener *brokerListener
	// principalMapper maps client certificates to principals
	// (ssl.principal.mapping.rules).
	principalMapper *auth.PrincipalMapper
	// authz caches the authorizer built from the image's ACLs (authz.go).
	authz   authzCache
	authzOn bool // authorizer.class.name is set
	// quotas measures clients' byte rates against their quotas.
	quotas      *quota.Manager
	advertised  config.Listener
	interBroker config.Listener
	zeroCopy    bool

	ctx    context.Context // canceled by Close, once requests are done
	cancel context.CancelFunc
	// stopping is canceled first thing in Close: long polls answer at
	// once with what they have, so shutdown does not wait for them.
	stopping    context.Context
	stopWaiting context.CancelFunc
	// heartbeatCtx ends the heartbeats, after a controlled shutdown.
	heartbeatCtx   context.Context
	stopHeartbeats context.CancelFunc
	wg             sync.WaitGroup
	closed         atomic.Bool
}

// New opens the data directory (recovering what needs it), replays the
// metadata log and binds the listener. Serving starts with Start.
func New(opts Options) (*Broker, error) {
	cfg := opts.Config
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{}).DialContext
	}
	b := &Broker{
		cfg:        cfg,
		nodeID:     int32(cfg.Int("node.id")),
		logger:     opts.Logger,
		fs:         opts.FS,
		now:        opts.Now,
		dial:       opts.Dial,
		dir:        cfg.LogDirs()[0],
		partitions: map[tp]*replica.Partition{},
		failedCh:   make(chan struct{}),
		zeroCopy:   cfg.Bool("strata.fetch.zero.copy"),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.stopping, b.stopWaiting = context.WithCancel(context.Background())
	b.heartbeatCtx, b.stopHeartbeats = context.WithCancel(b.ctx)
	b.versions = supportedVersions()
	b.authzOn = cfg.String("authorizer.class.name") != ""
	b.quotas = quota.NewManager(int(cfg.Int("quota.window.num")), time.Duration(cfg.Int("quota.window.size.seconds"))*time.Second)
	b.metrics = metrics.New(stateCollector{b})
	b.leaderQuota, b.followerQuota = replica.NewQuota(), replica.NewQuota()
	b.fetchSessions = newFetchSessions(int(cfg.Int("max.incremental.fetch.session.cache.slots")))

	cluster, err := cfg.Cluster()
	if err != nil {
		return nil, err
	}
	b.cluster = cluster
	if b.principalMapper, err = auth.ParseMappingRules(cfg.String("ssl.principal.mapping.rules")); err != nil {
		return nil, err
	}
	b.incarnation = metadata.NewUUID()
	if err := datadir.CheckMetaProperties(b.dir, b.nodeID, cfg.String("cluster.id")); err != nil {
		return nil, err
	}
	start := time.Now()
	b.logs, err = storage.OpenManager(b.fs, b.dir, storage.ManagerOptions{
		Logger:                  b.logger,
		Now:                     b.now,
		Default:                 b.storageConfig(cfg.TopicDefaults()),
		RetentionCheckInterval:  time.Duration(cfg.Int("log.retention.check.interval.ms")) * time.Millisecond,
		CheckpointInterval:      time.Duration(cfg.Int("log.flush.offset.checkpoint.interval.ms")) * time.Millisecond,
		RecoveryThreads:         int(cfg.Int("num.recovery.threads.per.data.dir")),
		DisableCleaner:          !cfg.Bool("log.cleaner.enable"),
		CleanerBackoff:          time.Duration(cfg.Int("log.cleaner.backoff.ms")) * time.Millisecond,
		CleanerThreads:          int(cfg.Int("log.cleaner.threads")),
		CleanerDedupeBufferSize: cfg.Int("log.cleaner.dedupe.buffer.size"),
		ProducerIDExpirationMs:  cfg.Int("producer.id.expiration.ms"),
		DecompressionBudget: record.NewBudget(cfg.Int("strata.decompression.budget.bytes")).
			SetMaxUncompressed(cfg.Int(record.MaxUncompressedKey)),

		// Where a restarted replica's high watermark comes from.
		HighWatermarkCheckpointInterval: time.Duration(cfg.Int("replica.high.watermark.checkpoint.interval.ms")) * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: opening %s: %w", b.dir, err)
	}
	b.applySettings(b.resolveSettings(nil))
	// The first registration tells the controller whether this broker
	// stopped cleanly last time (KIP-966).
	b.brokerEpoch.Store(b.logs.CleanShutdownBrokerEpoch())
	b.logger.Info("logs loaded", "dir", b.dir, "partitions", len(b.logs.Logs()), "duration", time.Since(start).Round(time.Millisecond))

	if cluster.Roles.Broker {
		if err := b.listen(cluster); err != nil {
			b.closeListeners()
			b.logs.Close()
			return nil, err
		}
	}
	if err := b.setupControllerSecurity(); err != nil {
		b.closeListeners()
		b.logs.Close()
		return nil, err
	}
	if cluster.Controller != nil {
		if err := b.listenController(*cluster.Controller); err != nil {
			b.abort()
			return nil, err
		}
	}

	gcfg := groupConfig(cfg)
	if err := gcfg.Validate(); err != nil {
		b.abort()
		return nil, err
	}
	b.groups = group.NewCoordinator(gcfg, group.Deps{Logger: b.logger, Topics: imageTopics{b}})
	tcfg := txnConfig(cfg)
	if err := tcfg.Validate(); err != nil {
		b.abort()
		return nil, err
	}
	b.txns = b.newTxnCoordinator(tcfg)

	// Before the metadata is replayed: the partitions it opens follow
	// their leaders and send their ISR changes to the controller.
	b.fetchers = newReplicaFetchers(b.fetcherConfig(), b.logger)
	ibOpts, err := b.interBrokerOpts()
	if err != nil {
		b.abort()
		return nil, err
	}
	b.fetchers.dial = func(addr string, nodeID int32) (leaderClient, error) { return dialLeader(addr, nodeID, nil, ibOpts...) }
	if !cluster.Alone {
		b.isr = controllerAlterer{b}
	}
	if err := b.openController(); err != nil {
		b.abort()
		return nil, err
	}
	b.ctrl = newControllerClient(b, cluster.Voters, time.Duration(cfg.Int("controller.quorum.request.timeout.ms"))*time.Millisecond)
	if err := b.checkClusterID(); err != nil {
		b.abort()
		return nil, err
	}
	if cluster.Roles.Broker {
		if err := b.joinCluster(b.ctx); err != nil {
			b.abort()
			return nil, err
		}
	}
	b.producerIDs = producer.NewIDAllocator(controller.ProducerIDBlockSize, b.allocateProducerIDs)
	if err := datadir.WriteMetaProperties(b.dir, b.nodeID, b.ClusterID()); err != nil {
		b.abort()
		return nil, err
	}
	b.server, err = wire.NewServer(wire.Config{
		Handler:        b,
		MaxRequestSize: int32(cfg.Int("socket.request.max.bytes")),
		IdleTimeout:    time.Duration(cfg.Int("connections.max.idle.ms")) * time.Millisecond,
		CopySplices:    !b.zeroCopy,

		MaxQueuedRequestBytes: cfg.Int("queued.max.request.bytes"),
		MaxConnections:        int(cfg.Int("max.connections")),
		MaxConnectionsPerIP:   int(cfg.Int("max.connections.per.ip")),
		ConnectionThrottle:    b.connectionThrottle,
		Logger:                b.logger,
		Observe:               b.observe,
	})
	if err != nil {
		b.abort()
		return nil, err
	}
	return b, nil
}

// openController opens the metadata log, starts this node's voter of the
// metadata quorum and the controller over it, and bootstraps or imports
// the cluster's first records.
func (b *Broker) openController() error {
	if !b.cluster.Roles.Controller {
		addrs := map[int32]string{}
		for _, v := range b.cluster.Voters {
			addrs[v.ID] = v.Addr()
		}
		b.observer = quorum.NewObserver(quorum.ObserverConfig{NodeID: b.nodeID, Voters: addrs, Dial: b.dialController, Logger: b.logger.With("component", "observer")})
		b.observer.Start()
		return b.openControllerOver(b.observer)
	}
	wal, err := datadir.OpenMetadataLog(b.logs)
	if err != nil {
		return err
	}
	voters := map[int32]string{}
	for _, v := range b.cluster.Voters {
		voters[v.ID] = ""
		if !b.cluster.Alone {
			voters[v.ID] = v.Addr()
		}
	}
	if err := datadir.ImportLegacyMetadata(b.fs, wal, voters, b.logger); err != nil {
		return err
	}
	b.quorum, err = quorum.Open(quorum.Config{
		NodeID:          b.nodeID,
		Voters:          voters,
		WAL:             wal,
		FS:              b.fs,
		ElectionTimeout: time.Duration(b.cfg.Int("controller.quorum.election.timeout.ms")) * time.Millisecond,
		ClusterID:       b.ClusterID,
		Logger:          b.logger.With("component", "quorum"),
		Dial:            b.raftDial,
		Authenticate:    b.raftAuthenticate(),
	})
	if err != nil {
		return err
	}
	// Started before the controller listener may hand it connections:
	// Start sets up the transport that serves them.
	b.quorum.Start()
	b.raft.Store(b.quorum)
	return b.openControllerOver(b.quorum)
}

// openControllerOver starts the controller over this node's voter or
// observer.
func (b *Broker) openControllerOver(q controller.Quorum) error {
	var err error
	b.controller, err = controller.Open(b.ctx, controller.Config{
		NodeID:                   b.nodeID,
		ClusterID:                b.cfg.String("cluster.id"),
		DefaultPartitions:        int32(b.cfg.Int("num.partitions")),
		DefaultReplicationFactor: int16(b.cfg.Int("default.replication.factor")),
		SnapshotBytes:            b.cfg.Int("metadata.log.max.record.bytes.between.snapshots"),
		SessionTimeout:           time.Duration(b.cfg.Int("broker.session.timeout.ms")) * time.Millisecond,
		Now:                      b.now,
		Policy: controller.Policy{MinInsyncReplicas: int(b.cfg.Int("min.insync.replicas")),
			UncleanLeaderElection: b.cfg.Bool("unclean.leader.election.enable")},
		AutoLeaderRebalance:                b.cfg.Bool("auto.leader.rebalance.enable"),
		LeaderImbalanceCheckInterval:       time.Duration(b.cfg.Int("leader.imbalance.check.interval.seconds")) * time.Second,
		LeaderImbalancePerBrokerPercentage: int(b.cfg.Int("leader.imbalance.per.broker.percentage")),
		ValidateTopicConfig:                config.ValidateTopicConfig,
		ValidateBrokerConfig:               validateDynamicBrokerConfig,
	}, q, b.logger, b.applyImage)
	if err != nil {
		return err
	}
	return b.controller.Bootstrap(b.ctx)
}

// controllerRequestTimeout bounds a metadata change that no client
// request's timeout bounds (producer-id blocks, __consumer_offsets, topics
// auto-created by Metadata): Kafka's request.timeout.ms default.
const controllerRequestTimeout = 30 * time.Second

// abort releases what New opened before failing.
func (b *Broker) abort() {
	b.cancel()
	if b.fetchers != nil {
		b.fetchers.close()
	}
	if b.ctrl != nil {
		b.ctrl.close()
	}
	if b.controller != nil {
		b.controller.Close()
	}
	if b.quorum != nil {
		b.quorum.Close()
	}
	if b.observer != nil {
		b.observer.Close()
	}
	if b.controllerListener != nil {
		b.controllerListener.Close()
		b.controllerServer.Close()
	}
	b.closeListeners()
	b.wg.Wait()
	b.logs.Close()
}

// listenController binds the controller listener and serves it: Raft
// messages to the quorum node (once it exists) and the controller APIs.
// It serves from now on, before the quorum has a leader, which needs it.
func (b *Broker) listenController(l config.Listener) error {
	bl := &brokerListener{Listener: l, tls: b.controllerSec.tls}
	if config.IsSASL(l.Protocol) {
		var err error
		if bl.sasl, err = b.configureSASL(l); err != nil {
			return err
		}
	}
	var tcfg *tls.Config
	if bl.tls != nil {
		var err error
		if tcfg, err = bl.tls.ServerConfig(); err != nil {
			return fmt.Errorf("broker: controller listener %s: %w", l.Name, err)
		}
	}
	ln, err := net.Listen("tcp", l.Addr())
	if err != nil {
		return fmt.Errorf("broker: listening on the controller listener %s: %w", l.Addr(), err)
	}
	b.controllerBL = bl
	srv, err := wire.NewServer(wire.Config{
		Handler:        controllerHandler{b},
		MaxRequestSize: int32(b.cfg.Int("socket.request.max.bytes")),
		IdleTimeout:    time.Duration(b.cfg.Int("connections.max.idle.ms")) * time.Millisecond,
		CopySplices:    true,
		Logger:         b.logger.With("listener", l.Name),
	})
	if err != nil {
		ln.Close()
		return err
	}
	b.controllerListener, b.controllerServer = ln, srv
	kafka := newChanListener(ln.Addr())
	if tcfg != nil {
		ln = wire.NewTLSListener(ln, tcfg)
	}
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		if err := srv.ServeListener(kafka, b.serveConfig(bl)); err != nil && !errors.Is(err, wire.ErrServerClosed) {
			b.logger.Error("controller listener stopped", "err", err)
		}
	}()
	go func() {
		defer b.wg.Done()
		b.serveControllerListener(ln, kafka)
	}()
	return nil
}

// advertisedListenerNamed is the advertised.listeners entry of a listener's
// name, or the listener itself (a wildcard host replaced by this machine's
// name).
func (b *Broker) advertisedListenerNamed(l config.Listener) config.Listener {
	if adv, err := config.ParseListeners(b.cfg.List("advertised.listeners")); err == nil {
		for _, a := range adv {
			if a.Name == l.Name {
				return a
			}
		}
	}
	if l.Host == "" || l.Host == "0.0.0.0" || l.Host == "::" {
		if h, err := os.Hostname(); err == nil {
			l.Host = h
		}
	}
	return l
}

// checkClusterID refuses a data directory whose meta.properties names
// another cluster than the quorum's.
func (b *Broker) checkClusterID() error {
	props, err := datadir.ReadMetaProperties(b.dir)
	if err != nil {
		return nil // a new directory adopts the quorum's
	}
	if id := props["cluster.id"]; id != "" && b.ClusterID() != "" && id != b.ClusterID() {
		return fmt.Errorf("broker: %s belongs to cluster %s, but the controllers' cluster is %s", filepath.Join(b.dir, datadir.MetaPropertiesFile), id, b.ClusterID())
	}
	return nil
}

// allocateProducerIDs reserves a block of producer ids from the active
// controller (AllocateProducerIds).
func (b *Broker) allocateProducerIDs() (int64, error) {
	ctx, cancel := context.WithTimeout(b.ctx, controllerRequestTimeout)
	defer cancel()
	req := kmsg.NewPtrAllocateProducerIDsRequest()
	req.BrokerID, req.BrokerEpoch = b.nodeID, b.brokerEpoch.Load()
	resp, err := b.ctrl.Request(ctx, req)
	if err != nil {
		return 0, err
	}
	r := resp.(*kmsg.AllocateProducerIDsResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return 0, err
	}
	if r.ProducerIDLen != controller.ProducerIDBlockSize {
		return 0, fmt.Errorf("broker: the controller reserved %d producer ids, not %d", r.ProducerIDLen, controller.ProducerIDBlockSize)
	}
	return r.ProducerIDStart, nil
}

// Addr returns the address clients are told to use.
func (b *Broker) Addr() string { return b.advertised.Addr() }

// ClusterID returns the cluster id.
func (b *Broker) ClusterID() string {
	if img := b.image.Load(); img != nil {
		return img.ClusterID
	}
	return ""
}

// NodeID returns this node's id.
func (b *Broker) NodeID() int32 { return b.nodeID }

// Start serves the Kafka listener and the admin HTTP listener, and runs
// background work (retention, flush.ms, checkpoints, producer expiry)
// until Close.
func (b *Broker) Start() error {
	if addr := b.cfg.String("strata.admin.listener"); addr != "" {
		admin, err := metrics.StartAdmin(addr, b.metrics, metrics.Health{Live: b.live, Ready: b.ready}, b.logger)
		if err != nil {
			return err
		}
		b.admin = admin
	}
	if b.cluster.Roles.Broker {
		for _, bl := range b.listeners {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				if err := b.server.ServeListener(bl.ln, b.serveConfig(bl)); err != nil && !errors.Is(err, wire.ErrServerClosed) {
					b.logger.Error("listener stopped", "listener", bl.Name, "err", err)
				}
			}()
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.runHeartbeats(b.heartbeatCtx)
		}()
		b.startJWKSRefresh()
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.housekeeping()
	}()
	b.logs.Start()
	listener := ""
	for i, bl := range b.listeners {
		if i > 0 {
			listener += ","
		}
		listener += bl.Name + "://" + bl.ln.Addr().String()
	}
	controllerListener := ""
	if b.controllerListener != nil {
		controllerListener = b.controllerListener.Addr().String()
	}
	b.logger.Info("node started", "node.id", b.nodeID, "process.roles", b.cfg.String("process.roles"), "cluster.id", b.ClusterID(),
		"listener", listener, "advertised", b.Addr(), "controller.listener", controllerListener, "log.dir", b.dir, "admin", b.AdminAddr())
	return nil
}

// Failed is closed once this node's log directory failed (a log taken
// offline by an I/O error, or its metadata quorum stopped by one) and the
// controller fenced it, moving its leaderships away. The node is then of no
// use until restarted on a working disk: its owner stops it (Kill), as
// Kafka halts when its last log directory fails; strata serve exits.
func (b *Broker) Failed() <-chan struct{} { return b.failedCh }

// Stopping is closed once Close or Kill is under way.
func (b *Broker) Stopping() <-chan struct{} { return b.ctx.Done() }

// FailedErr is what failed the log directory, nil while it works.
func (b *Broker) FailedErr() error { return b.failed() }

// AdminAddr is the admin HTTP listener's address, or "" when disabled.
func (b *Broker) AdminAddr() string {
	if b.admin == nil {
		return ""
	}
	return b.admin.Addr()
}

// Metrics returns the broker's metrics.
func (b *Broker) Metrics() *metrics.Broker { return b.metrics }

// live reports whether the broker can still write: a log taken offline by
// an I/O error makes it unhealthy.
func (b *Broker) live() error {
	return b.failed()
}

// failed returns what took this node's log directory out of service: an
// I/O error that stopped its metadata quorum or took a hosted log offline.
func (b *Broker) failed() error {
	if b.controller != nil {
		if err := b.controller.Err(); err != nil {
			return err
		}
	}
	return b.logsFailed()
}

// logsFailed returns the error that took a hosted partition's log offline,
// if one did.
func (b *Broker) logsFailed() error {
	b.partitionsMu.RLock()
	defer b.partitionsMu.RUnlock()
	for key, p := range b.partitions {
		if err := p.Offline(); err != nil {
			return fmt.Errorf("partition %s-%d is offline: %w", key.topic, key.partition, err)
		}
	}
	return nil
}

// ready reports whether the broker serves clients.
func (b *Broker) ready() error {
	if b.closed.Load() {
		return errors.New("shutting down")
	}
	return b.live()
}

// housekeeping forgets idle producers and checks the ISRs until Close. Retention, flush.ms
// and checkpoints run in the storage manager's own loop.
func (b *Broker) housekeeping() {
	expire := time.NewTicker(producerExpirationCheckInterval)
	defer expire.Stop()
	// Kafka's isr-expiration task: followers out of sync for
	// replica.lag.time.max.ms leave the ISR.
	isrCheck := time.NewTicker(max(time.Duration(b.cfg.Int("replica.lag.time.max.ms"))*time.Millisecond/2, time.Millisecond))
	defer isrCheck.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-expire.C:
			b.expireProducers()
		case <-isrCheck.C:
			b.tickPartitions()
		}
	}
}

// Close stops serving, waits (up to shutdown.timeout.ms) for requests under
// way, then flushes and closes every log and writes the clean-shutdown
// marker.
func (b *Broker) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	start := time.Now()
	if b.cluster.Roles.Broker && !b.cluster.Alone {
		// Controlled shutdown: the controller moves this broker's
		// leaderships to other in-sync replicas while it still serves.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.cfg.Int("broker.session.timeout.ms"))*time.Millisecond)
		b.controlledShutdown(ctx)
		cancel()
	}
	if b.quorum != nil && !b.cluster.Alone {
		// Hand the quorum's leadership over before the voter stops: the
		// others elect at once instead of after an election timeout.
		timeout := 2 * time.Duration(b.cfg.Int("controller.quorum.election.timeout.ms")) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := b.quorum.TransferLeadership(ctx); err != nil {
			b.logger.Warn("handing over the metadata quorum's leadership", "err", err)
		}
		cancel()
	}
	b.stopHeartbeats()
	// Answer the waiting requests first: long polls with what they have,
	// parked group requests with NOT_COORDINATOR (clients move on).
	b.stopWaiting()
	b.groups.Close()
	b.txns.Close()
	b.txnMarkers.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.cfg.Int("shutdown.timeout.ms"))*time.Millisecond)
	defer cancel()
	if err := b.server.Shutdown(ctx); err != nil {
		b.server.Close()
	}
	b.cancel()
	if b.controllerListener != nil {
		// Its accept loop is one of the goroutines waited for: no new
		// controller connections from now on (raft's stay until the
		// quorum closes).
		b.controllerListener.Close()
	}
	b.wg.Wait()
	if b.admin != nil {
		b.admin.Close()
	}
	// Followers stop fetching before their logs close.
	b.fetchers.close()
	b.snapshotProducers()
	b.ctrl.close()
	b.controller.Close()
	if b.quorum != nil {
		if qerr := b.quorum.Close(); qerr != nil {
			b.logger.Warn("metadata quorum", "err", qerr)
		}
	}
	if b.observer != nil {
		b.observer.Close()
	}
	if b.controllerListener != nil {
		b.controllerListener.Close()
		b.controllerServer.Close()
	}
	b.logs.SetBrokerEpoch(b.brokerEpoch.Load())
	err := b.logs.Close()
	b.logger.Info("broker stopped", "duration", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

// Kill stops the node as abruptly as a process can stop itself: no
// controlled shutdown, no hand-over of the quorum's leadership, no wait for
// requests under way; listeners and connections close at once, unwritten
// responses are dropped, and peers learn of it only by their connections
// breaking and by missed heartbeats. It returns once the node's goroutines
// have stopped. The logs are then closed as Close closes them (flushed,
// checkpointed, marked clean) unless the file system refuses: a caller that
// wants what a crash leaves on disk fails every write of the node's FS
// before calling Kill (strata.Cluster.Kill does, through a vfs.ErrorFS).
func (b *Broker) Kill() {
	if !b.closed.CompareAndSwap(false, true) {
		return
	}
	b.stopHeartbeats()
	b.stopWaiting()
	b.server.Close()
	if b.controllerListener != nil {
		b.controllerServer.Close()
		b.controllerListener.Close()
	}
	if b.admin != nil {
		b.admin.Close()
	}
	b.cancel()
	b.fetchers.close()
	b.ctrl.close()
	b.controller.Close()
	if b.quorum != nil {
		b.quorum.Close()
	}
	if b.observer != nil {
		b.observer.Close()
	}
	b.wg.Wait()
	b.groups.Close()
	b.logs.Close()
	b.logger.Info("broker killed")
}

// snapshotProducers writes every hosted partition's producer state at its
// log end, so the next start replays nothing; a few at a time, as each
// snapshot is an fsync.
func (b *Broker) snapshotProducers() {
	b.partitionsMu.RLock()
	parts := slices.Collect(maps.Values(b.partitions))
	b.partitionsMu.RUnlock()
	work := make(chan *replica.Partition)
	var wg sync.WaitGroup
	for range min(8, len(parts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if err := p.SnapshotProducers(); err != nil {
					b.logger.Warn("writing producer snapshot", "topic", p.Topic, "partition", p.Index, "err", err)
				}
			}
		}()
	}
	for _, p := range parts {
		work <- p
	}
	close(work)
	wg.Wait()
}

// partition returns the local replica of a partition.
func (b *Broker) partition(topic string, partition int32) (*replica.Partition, bool) {
	b.partitionsMu.RLock()
	defer b.partitionsMu.RUnlock()
	p, ok := b.partitions[tp{topic, partition}]
	return p, ok
}

// hostedPartition finds the local replica of a partition the image has:
// UNKNOWN_TOPIC_OR_PARTITION when the image has no such partition,
// NOT_LEADER_OR_FOLLOWER when this broker does not host it. The replica
// checks leadership and leader epochs itself.
func (b *Broker) hostedPartition(img *metadata.Image, topic string, partition int32) (*replica.Partition, error) {
	if _, _, ok := img.Partition(topic, partition); !ok {
		return nil, kerr.UnknownTopicOrPartition
	}
	p, ok := b.partition(topic, partition)
	if !ok {
		return nil, kerr.NotLeaderForPartition
	}
	return p, nil
}

// storageConfig converts a topic's effective configuration. Retention
// applies to topics with "delete" in cleanup.policy, the log cleaner to
// those with "compact".
func (b *Broker) storageConfig(values map[string]string) storage.Config {
	t := config.ResolveTopic(values, nil)
	c := storage.DefaultConfig()
	c.SegmentBytes = t.Int("segment.bytes")
	c.SegmentMs = t.Int("segment.ms")
	c.SegmentIndexBytes = int(t.Int("segment.index.bytes"))
	c.IndexIntervalBytes = int(t.Int("index.interval.bytes"))
	c.RetentionMs = t.Int("retention.ms")
	c.RetentionBytes = t.Int("retention.bytes")
	c.FlushMessages = t.Int("flush.messages")
	c.FlushMs = t.Int("flush.ms")
	c.FileDeleteDelayMs = t.Int("file.delete.delay.ms")
	c.MaxMessageBytes = int(t.Int("max.message.bytes"))
	policy := config.SplitList(t.String("cleanup.policy"))
	c.Delete = slices.Contains(policy, "delete")
	c.Compact = slices.Contains(policy, "compact")
	c.MinCleanableDirtyRatio = t.Float("min.cleanable.dirty.ratio")
	c.DeleteRetentionMs = t.Int("delete.retention.ms")
	c.MinCompactionLagMs = t.Int("min.compaction.lag.ms")
	return c
}

// topicConfig returns a topic's effective configuration values.
func (b *Broker) topicConfig(img *metadata.Image, topic string) map[string]string {
	defaults := b.topicDefaults(img)
	overrides := img.TopicConfig(topic)
	if len(overrides) == 0 {
		return defaults
	}
	out := make(map[string]string, len(defaults))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range overrides {
		if config.ValidateTopicConfig(k, v) == nil {
			out[k] = v
		}
	}
	return out
}

// topicDefaults is the static server configuration's topic defaults with
// dynamic broker overrides (cluster-wide, then this node's) applied.
func (b *Broker) topicDefaults(img *metadata.Image) map[string]string {
	defaults := b.cfg.TopicDefaults()
	for _, name := range []string{"", strconv.Itoa(int(b.nodeID))} {
		for k, v := range img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker, Name: name}] {
			if key, ok := config.LookupServer(k); ok && key.Topic != "" {
				defaults[key.Topic] = v
			}
		}
	}
	return defaults
}

// replicaSettings extracts what a replica acts on from a topic's values.
func (b *Broker) replicaSettings(values map[string]string) replica.Settings {
	t := config.ResolveTopic(values, nil)
	return replica.Settings{
		MinInsyncReplicas: int(t.Int("min.insync.replicas")),
		LogAppendTime:     t.String("message.timestamp.type") == "LogAppendTime",
		SyncEveryAppend:   t.Int("flush.messages") == 1,
		Log:               b.storageConfig(values),
	}
}

// replicaOptions are what every replica on this broker shares.
func (b *Broker) replicaOptions() replica.Options {
	opts := replica.Options{
		NodeID:     b.nodeID,
		LagTimeMax: time.Duration(b.cfg.Int("replica.lag.time.max.ms")) * time.Millisecond,
		Now:        b.now,
		Logger:     b.logger,
		Context:    b.ctx,
		ISRChanged: b.countISRChange,
	}
	if b.isr != nil {
		opts.AlterPartition = func(ctx context.Context, topic string, partition int32, c replica.ISRChange) (int32, error) {
			return b.isr.alterPartition(ctx, topic, partition, c.LeaderEpoch, c.PartitionEpoch, c.ISR)
		}
	}
	return opts
}

// validateDynamicBrokerConfig accepts dynamic broker keys.
func validateDynamicBrokerConfig(name, value string) error {
	k, ok := config.LookupServer(name)
	if !ok || !k.Dynamic {
		return fmt.Errorf("%s cannot be changed at run time", name)
	}
	return k.Validate(value)
}
