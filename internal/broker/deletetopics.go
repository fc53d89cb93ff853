package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// DeleteTopics: v1-6.
//
// Behavior:
// * Topics are named by name, or (v6+) by id. The partitions' directories
// are renamed away at once and removed in the background, as in Kafka.
// * Internal topics cannot be deleted: INVALID_TOPIC_EXCEPTION.
// * delete.topic.enable=false refuses every deletion with
// TOPIC_DELETION_DISABLED.
func init() { register(20, 1, 6, (*Broker).handleDeleteTopics) }

func (b *Broker) handleDeleteTopics(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DeleteTopicsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name string
		id   metadata.UUID
	}
	var targets []target
	if r.Version >= 6 {
		for _, t := range r.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			targets = append(targets, target{name, metadata.UUID(t.TopicID)})
		}
	} else {
		for _, name := range r.TopicNames {
			targets = append(targets, target{name: name})
		}
	}
	var deleted []string
	for _, t := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		var err error
		switch {
		case !b.cfg.Bool("delete.topic.enable"):
			err = fmt.Errorf("%w: delete.topic.enable is false", kerr.TopicDeletionDisabled)
		case isInternalTopic(t.name):
			err = fmt.Errorf("%w: cannot delete internal topic %s", kerr.InvalidTopicException, t.name)
		case t.name == "" && t.id.IsZero():
			err = fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest)
		default:
			t.name, t.id, err = b.controller.DeleteTopic(t.name, t.id)
		}
		if t.name != "" {
			name := t.name
			st.Topic = &name
		}
		st.TopicID = t.id
		if err != nil {
			st.ErrorCode = errorCode(err)
			if r.Version >= 5 {
				st.ErrorMessage = errorMessage(err)
			}
		} else {
			deleted = append(deleted, t.name)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(deleted) == 0 {
		return respond(resp)
	}
	// Committed offsets of deleted topics go too, as in Kafka, before the
	// answer: a topic created again with the same name starts with none.
	return wire.Response{Deferred: func() wire.Response {
		b.groups.DeleteTopicOffsets(ctx, deleted)
		return respond(resp)
	}}
}
