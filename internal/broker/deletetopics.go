package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
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
func init() {
	register(api{key: kmsg.DeleteTopics, min: 1, max: 6, handle: (*Broker).handleDeleteTopics, forwarded: true,
		authorize: authorizeDeleteTopics, errors: deleteTopicsErrors, afterForward: (*Broker).afterDeleteTopics,
		quota: requestTime})
}

func (b *Broker) handleDeleteTopics(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DeleteTopicsRequest)
	var targets []controller.TopicRef
	if r.Version >= 6 {
		for _, t := range r.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			targets = append(targets, controller.TopicRef{Name: name, ID: metadata.UUID(t.TopicID)})
		}
	} else {
		for _, name := range r.TopicNames {
			targets = append(targets, controller.TopicRef{Name: name})
		}
	}
	// Refusals the controller need not see; the rest go in one proposal.
	results := make([]controller.DeleteResult, len(targets))
	var asked []controller.TopicRef
	var index []int
	for i, t := range targets {
		results[i].TopicRef = t
		switch {
		case !b.cfg.Bool("delete.topic.enable"):
			results[i].Err = fmt.Errorf("%w: delete.topic.enable is false", kerr.TopicDeletionDisabled)
		case isInternalTopic(t.Name):
			results[i].Err = fmt.Errorf("%w: cannot delete internal topic %s", kerr.InvalidTopicException, t.Name)
		case t.Name == "" && t.ID.IsZero():
			results[i].Err = fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest)
		default:
			asked = append(asked, t)
			index = append(index, i)
		}
	}
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		if len(asked) > 0 {
			for j, res := range b.controller.DeleteTopics(ctx, asked) {
				results[index[j]] = res
			}
		}
		resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
		for _, res := range results {
			st := kmsg.NewDeleteTopicsResponseTopic()
			if res.Name != "" {
				name := res.Name
				st.Topic = &name
			}
			st.TopicID = res.ID
			if res.Err != nil {
				st.ErrorCode = errorCode(res.Err)
				if r.Version >= 5 {
					st.ErrorMessage = errorMessage(res.Err)
				}
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
}

// deleteTopicsErrors answers each topic req names (v0-5) or each topic or
// id (v6+) with code.
func deleteTopicsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.DeleteTopicsRequest), resp.(*kmsg.DeleteTopicsResponse)
	for _, name := range r.TopicNames {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.ErrorCode = kmsg.StringPtr(name), code
		out.Topics = append(out.Topics, st)
	}
	for _, t := range r.Topics {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID, st.ErrorCode = t.Topic, t.TopicID, code
		out.Topics = append(out.Topics, st)
	}
}

// afterDeleteTopics deletes the committed offsets of deleted topics, for
// the groups this broker coordinates, before the answer (a topic created
// again with the same name starts with none; every broker also drops them
// when it applies the image without the topic), and answers once this
// node's image no longer has the topics.
func (b *Broker) afterDeleteTopics(ctx context.Context, _ kmsg.Request, resp kmsg.Response) {
	var deleted []string
	for _, t := range resp.(*kmsg.DeleteTopicsResponse).Topics {
		if t.ErrorCode == 0 && t.Topic != nil {
			deleted = append(deleted, *t.Topic)
		}
	}
	if len(deleted) == 0 {
		return
	}
	b.groups.DeleteTopicOffsets(ctx, deleted)
	b.awaitImage(ctx, func(img *metadata.Image) bool {
		for _, name := range deleted {
			if img.Topics[name] != nil {
				return false
			}
		}
		return true
	})
}
