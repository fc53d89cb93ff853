package broker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeConfigs: v1-4; AlterConfigs: v0-2; IncrementalAlterConfigs: v0-1.
//
// Behavior:
// * Topic resources show every topic key with its effective value and
// source (dynamic topic override, dynamic broker default, static broker
// setting, or default), with synonyms (v1+), types and documentation (v3+).
// * Broker resources (this node's id, or "" for the cluster-wide dynamic
// defaults) show every broker key for the node, and only the keys set
// cluster-wide for "", with Kafka's sources: DYNAMIC_BROKER_CONFIG,
// DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, in
// that precedence. Keys Kafka's DynamicBrokerConfig cannot change at run
// time are read only and refused (INVALID_CONFIG). Dynamic values are
// records of the metadata log and take effect without a restart: log.*
// keys as the defaults of the matching topic keys, the log cleaner's keys
// (log.cleaner.backoff.ms, .threads, .dedupe.buffer.size) in the running
// cleaner, producer.id.expiration.ms in producer expiry and cleaning,
// num.recovery.threads.per.data.dir at the next shutdown. As in Kafka,
// thread counts may change by at most a factor of two at a time, and
// listeners and advertised.listeners are per broker and, with a Raft
// quorum, cannot change (setting their current value is accepted).
// * AlterConfigs replaces a resource's whole dynamic configuration, as in
// Kafka; IncrementalAlterConfigs sets, deletes, appends to or subtracts
// from single keys.
// * Broker loggers (resource type 8) are not supported: INVALID_REQUEST.
func init() {
	register(api{key: kmsg.DescribeConfigs, min: 1, max: 4, handle: (*Broker).handleDescribeConfigs,
		authorize: authorizeDescribeConfigs, errors: describeConfigsErrors, quota: requestTime})
	register(api{key: kmsg.AlterConfigs, min: 0, max: 2, handle: (*Broker).handleAlterConfigs, forwarded: true,
		authorize: authorizeAlterConfigs, errors: alterConfigsErrors, quota: requestTime})
	register(api{key: kmsg.IncrementalAlterConfigs, min: 0, max: 1, handle: (*Broker).handleIncrementalAlterConfigs, forwarded: true,
		authorize: authorizeIncrementalAlterConfigs, errors: incrementalAlterConfigsErrors, quota: requestTime})
}

func (b *Broker) handleDescribeConfigs(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeConfigsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	img := b.image.Load()
	for _, res := range r.Resources {
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = res.ResourceType, res.ResourceName
		var entries []configEntry
		var err error
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			entries, err = b.topicConfigEntries(img, res.ResourceName)
		case kmsg.ConfigResourceTypeBroker:
			entries, err = b.brokerConfigEntries(img, res.ResourceName)
		default:
			err = fmt.Errorf("%w: resource type %d is not supported", kerr.InvalidRequest, res.ResourceType)
		}
		if err != nil {
			sr.ErrorCode = errorCode(err)
			sr.ErrorMessage = errorMessage(err)
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		for _, e := range entries {
			if len(res.ConfigNames) > 0 && !slices.Contains(res.ConfigNames, e.key.Name) {
				continue
			}
			sr.Configs = append(sr.Configs, e.describe(r))
		}
		resp.Resources = append(resp.Resources, sr)
	}
	return respond(resp)
}

// configEntry is one key's effective value and where it came from, with the
// lower-precedence values it shadows.
type configEntry struct {
	key      *config.Key
	readOnly bool
	synonyms []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym // highest precedence first, including the value itself
}

func (e configEntry) describe(r *kmsg.DescribeConfigsRequest) kmsg.DescribeConfigsResponseResourceConfig {
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name = e.key.Name
	c.ReadOnly = e.readOnly
	c.IsSensitive = e.key.Sensitive
	top := e.synonyms[0]
	c.Value, c.Source = top.Value, top.Source
	c.IsDefault = top.Source == kmsg.ConfigSourceDefaultConfig
	if r.IncludeSynonyms {
		c.ConfigSynonyms = e.synonyms
	}
	c.ConfigType = configType(e.key.Type)
	if r.IncludeDocumentation {
		doc := e.key.Doc
		c.Documentation = &doc
	}
	return c
}

func synonym(name, value string, src kmsg.ConfigSource) kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name, s.Value, s.Source = name, &value, src
	return s
}

func configType(t config.Type) kmsg.ConfigType {
	switch t {
	case config.TypeBool:
		return kmsg.ConfigTypeBoolean
	case config.TypeInt:
		return kmsg.ConfigTypeInt
	case config.TypeLong:
		return kmsg.ConfigTypeLong
	case config.TypeList:
		return kmsg.ConfigTypeList
	case config.TypeDouble:
		return kmsg.ConfigTypeDouble
	}
	return kmsg.ConfigTypeString
}

// brokerKeyFor returns the broker key that supplies a topic key's default.
func brokerKeyFor(topicKey string) *config.Key {
	for i := range config.ServerKeys {
		if config.ServerKeys[i].Topic == topicKey {
			return &config.ServerKeys[i]
		}
	}
	return nil
}

func staticSource(src config.Source) kmsg.ConfigSource {
	if src == config.SourceDefault {
		return kmsg.ConfigSourceDefaultConfig
	}
	return kmsg.ConfigSourceStaticBrokerConfig
}

func (b *Broker) topicConfigEntries(img *metadata.Image, topic string) ([]configEntry, error) {
	if _, ok := img.Topics[topic]; !ok {
		return nil, fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, topic)
	}
	overrides := img.TopicConfig(topic)
	staticDefaults := b.cfg.TopicDefaults()
	var out []configEntry
	for i := range config.TopicKeys {
		k := &config.TopicKeys[i]
		e := configEntry{key: k}
		if v, ok := overrides[k.Name]; ok {
			e.synonyms = append(e.synonyms, synonym(k.Name, v, kmsg.ConfigSourceDynamicTopicConfig))
		}
		if bk := brokerKeyFor(k.Name); bk != nil {
			if v, ok := img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker, Name: strconv.Itoa(int(b.nodeID))}][bk.Name]; ok {
				e.synonyms = append(e.synonyms, synonym(bk.Name, v, kmsg.ConfigSourceDynamicBrokerConfig))
			}
			if v, ok := img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker}][bk.Name]; ok {
				e.synonyms = append(e.synonyms, synonym(bk.Name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig))
			}
			_, src := b.cfg.Value(bk.Name)
			e.synonyms = append(e.synonyms, synonym(bk.Name, staticDefaults[k.Name], staticSource(src)))
		} else {
			e.synonyms = append(e.synonyms, synonym(k.Name, k.Default, kmsg.ConfigSourceDefaultConfig))
		}
		out = append(out, e)
	}
	return out, nil
}

func (b *Broker) brokerConfigEntries(img *metadata.Image, name string) ([]configEntry, error) {
	self := strconv.Itoa(int(b.nodeID))
	if name != "" && name != self {
		return nil, fmt.Errorf("%w: broker %q is not this node (%s)", kerr.InvalidRequest, name, self)
	}
	var out []configEntry
	for i := range config.ServerKeys {
		k := &config.ServerKeys[i]
		e := configEntry{key: k, readOnly: !k.Dynamic}
		if name != "" {
			if v, ok := img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker, Name: self}][k.Name]; ok {
				e.synonyms = append(e.synonyms, synonym(k.Name, v, kmsg.ConfigSourceDynamicBrokerConfig))
			}
		}
		if v, ok := img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker}][k.Name]; ok {
			e.synonyms = append(e.synonyms, synonym(k.Name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig))
		}
		if name != "" {
			v, src := b.cfg.Value(k.Name)
			e.synonyms = append(e.synonyms, synonym(k.Name, v, staticSource(src)))
		}
		if len(e.synonyms) == 0 {
			continue // the cluster default resource lists only what is set
		}
		out = append(out, e)
	}
	return out, nil
}

func (b *Broker) handleAlterConfigs(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AlterConfigsRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
		for _, res := range r.Resources {
			sr := kmsg.NewAlterConfigsResponseResource()
			sr.ResourceType, sr.ResourceName = res.ResourceType, res.ResourceName
			var changes []controller.ConfigChange
			for _, c := range res.Configs {
				changes = append(changes, controller.ConfigChange{Name: c.Name, Value: c.Value})
			}
			err := b.alterConfigs(ctx, res.ResourceType, res.ResourceName, changes, true, r.ValidateOnly)
			sr.ErrorCode, sr.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Resources = append(resp.Resources, sr)
		}
		return resp
	})
}

func (b *Broker) handleIncrementalAlterConfigs(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.IncrementalAlterConfigsRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		img := b.image.Load()
		for _, res := range r.Resources {
			sr := kmsg.NewIncrementalAlterConfigsResponseResource()
			sr.ResourceType, sr.ResourceName = res.ResourceType, res.ResourceName
			changes, err := b.incrementalChanges(img, res)
			if err == nil {
				err = b.alterConfigs(ctx, res.ResourceType, res.ResourceName, changes, false, r.ValidateOnly)
			}
			sr.ErrorCode, sr.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Resources = append(resp.Resources, sr)
		}
		return resp
	})
}

// incrementalChanges turns set/delete/append/subtract operations into
// whole-value changes against the current effective values.
func (b *Broker) incrementalChanges(img *metadata.Image, res kmsg.IncrementalAlterConfigsRequestResource) ([]controller.ConfigChange, error) {
	var changes []controller.ConfigChange
	seen := map[string]bool{}
	for _, c := range res.Configs {
		if seen[c.Name] {
			return nil, fmt.Errorf("%w: %s is changed twice", kerr.InvalidRequest, c.Name)
		}
		seen[c.Name] = true
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Value == nil {
				return nil, fmt.Errorf("%w: null value for %s", kerr.InvalidConfig, c.Name)
			}
			changes = append(changes, controller.ConfigChange{Name: c.Name, Value: c.Value})
		case kmsg.IncrementalAlterConfigOpDelete:
			changes = append(changes, controller.ConfigChange{Name: c.Name})
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			k, ok := config.LookupTopic(c.Name)
			if res.ResourceType == kmsg.ConfigResourceTypeBroker {
				k, ok = config.LookupServer(c.Name)
			}
			if !ok || k.Type != config.TypeList {
				return nil, fmt.Errorf("%w: %s is not a list", kerr.InvalidConfig, c.Name)
			}
			var current []string
			if res.ResourceType == kmsg.ConfigResourceTypeTopic {
				current = config.SplitList(b.topicConfig(img, res.ResourceName)[c.Name])
			} else {
				current = config.SplitList(b.brokerValue(img, res.ResourceName, c.Name))
			}
			var add []string
			if c.Value != nil {
				add = config.SplitList(*c.Value)
			}
			for _, v := range add {
				if c.Op == kmsg.IncrementalAlterConfigOpAppend && !slices.Contains(current, v) {
					current = append(current, v)
				} else if c.Op == kmsg.IncrementalAlterConfigOpSubtract {
					current = slices.DeleteFunc(current, func(s string) bool { return s == v })
				}
			}
			joined := strings.Join(current, ",")
			changes = append(changes, controller.ConfigChange{Name: c.Name, Value: &joined})
		default:
			return nil, fmt.Errorf("%w: unknown operation %d", kerr.InvalidRequest, c.Op)
		}
	}
	return changes, nil
}

func (b *Broker) alterConfigs(ctx context.Context, rt kmsg.ConfigResourceType, name string, changes []controller.ConfigChange, replace, validateOnly bool) error {
	var t int8
	switch rt {
	case kmsg.ConfigResourceTypeTopic:
		t = metadata.ResourceTopic
	case kmsg.ConfigResourceTypeBroker:
		t = metadata.ResourceBroker
		if err := b.checkBrokerChanges(name, changes); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: resource type %d is not supported", kerr.InvalidRequest, rt)
	}
	err := b.controller.AlterConfigs(ctx, t, name, changes, replace, validateOnly)
	if err == nil && !validateOnly {
		b.logger.Info("configuration changed", "resource", rt.String(), "name", name, "changes", len(changes))
	}
	return err
}

// brokerValue returns a broker key's effective value for a broker
// resource: for this node, its dynamic value, else the cluster-wide one,
// else the static one; for "" (cluster-wide), the cluster-wide value, else
// the static one.
func (b *Broker) brokerValue(img *metadata.Image, resource, name string) string {
	layers := b.brokerConfigs(img)
	if resource != "" {
		if v, ok := layers[1][name]; ok {
			return v
		}
	}
	if v, ok := layers[0][name]; ok {
		return v
	}
	return b.cfg.String(name)
}

// checkBrokerChanges applies the checks of Kafka's DynamicBrokerConfig that
// need more than a key and its value (the controller checks those): keys
// that are per broker, thread counts, listeners.
func (b *Broker) checkBrokerChanges(resource string, changes []controller.ConfigChange) error {
	self := strconv.Itoa(int(b.nodeID))
	img := b.image.Load()
	for _, c := range changes {
		k, ok := config.LookupServer(c.Name)
		if !ok || !k.Dynamic {
			continue // refused by the controller's validation
		}
		if k.PerBroker && resource == "" {
			return fmt.Errorf("%w: cannot update %s at default cluster level, broker id must be specified", kerr.InvalidConfig, c.Name)
		}
		if c.Value == nil {
			continue
		}
		switch c.Name {
		case "listeners", "advertised.listeners":
			if resource != self {
				return fmt.Errorf("%w: %s of broker %s must be changed through that broker", kerr.InvalidRequest, c.Name, resource)
			}
			if strings.Join(config.SplitList(*c.Value), ",") != strings.Join(b.cfg.List(c.Name), ",") {
				return fmt.Errorf("%w: %s cannot be altered when using a Raft-based metadata quorum (it is %q)", kerr.InvalidConfig, c.Name, b.cfg.String(c.Name))
			}
		case "log.cleaner.threads", "num.recovery.threads.per.data.dir":
			// Kafka's rule for a thread pool resized at run time.
			next, err := strconv.ParseInt(*c.Value, 10, 32)
			if err != nil {
				continue // refused by the controller's validation
			}
			current, _ := strconv.ParseInt(b.brokerValue(img, resource, c.Name), 10, 32)
			if next < current/2 || next > current*2 {
				return fmt.Errorf("%w: %s=%d: a thread count may change to between half and double its current value %d", kerr.InvalidConfig, c.Name, next, current)
			}
		}
	}
	return nil
}

// describeConfigsErrors answers each resource req names with code.
func describeConfigsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.DescribeConfigsResponse)
	for _, res := range req.(*kmsg.DescribeConfigsRequest).Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
		out.Resources = append(out.Resources, rr)
	}
}

// alterConfigsErrors answers each resource req names with code.
func alterConfigsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.AlterConfigsResponse)
	for _, res := range req.(*kmsg.AlterConfigsRequest).Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
		out.Resources = append(out.Resources, rr)
	}
}

// incrementalAlterConfigsErrors answers each resource req names with code.
func incrementalAlterConfigsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.IncrementalAlterConfigsResponse)
	for _, res := range req.(*kmsg.IncrementalAlterConfigsRequest).Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
		out.Resources = append(out.Resources, rr)
	}
}
