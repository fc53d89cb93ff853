package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// setAllErrors fills resp, the response to req, with code wherever Kafka
// puts an error for the request as a whole: the top-level error code, or
// each entry the request named. It covers the APIs whose authorization
// rules refuse whole requests (authz.go).
func setAllErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	if appendErrors(req, resp, code) {
		return
	}
	switch r := req.(type) {
	case *kmsg.OffsetFetchRequest:
		out := resp.(*kmsg.OffsetFetchResponse)
		out.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.Offset = p, code, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.AddPartitionsToTxnRequest:
		out := resp.(*kmsg.AddPartitionsToTxnResponse)
		out.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.AddOffsetsToTxnRequest:
		resp.(*kmsg.AddOffsetsToTxnResponse).ErrorCode = code
	case *kmsg.EndTxnRequest:
		out := resp.(*kmsg.EndTxnResponse)
		out.ErrorCode, out.ProducerID, out.ProducerEpoch = code, -1, -1
	case *kmsg.WriteTxnMarkersRequest:
		out := resp.(*kmsg.WriteTxnMarkersResponse)
		for _, m := range r.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition, rp.ErrorCode = p, code
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			out.Markers = append(out.Markers, rm)
		}
	case *kmsg.FindCoordinatorRequest:
		out := resp.(*kmsg.FindCoordinatorResponse)
		out.ErrorCode, out.NodeID, out.Port = code, -1, -1
	case *kmsg.InitProducerIDRequest:
		out := resp.(*kmsg.InitProducerIDResponse)
		out.ErrorCode, out.ProducerID, out.ProducerEpoch = code, -1, -1
	case *kmsg.JoinGroupRequest:
		out := resp.(*kmsg.JoinGroupResponse)
		out.ErrorCode, out.Generation = code, -1
	case *kmsg.SyncGroupRequest:
		resp.(*kmsg.SyncGroupResponse).ErrorCode = code
	case *kmsg.HeartbeatRequest:
		resp.(*kmsg.HeartbeatResponse).ErrorCode = code
	case *kmsg.LeaveGroupRequest:
		resp.(*kmsg.LeaveGroupResponse).ErrorCode = code
	case *kmsg.ConsumerGroupHeartbeatRequest:
		resp.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode = code
	case *kmsg.OffsetDeleteRequest:
		resp.(*kmsg.OffsetDeleteResponse).ErrorCode = code
	case *kmsg.AlterConfigsRequest:
		out := resp.(*kmsg.AlterConfigsResponse)
		for _, res := range r.Resources {
			rr := kmsg.NewAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
			out.Resources = append(out.Resources, rr)
		}
	case *kmsg.IncrementalAlterConfigsRequest:
		out := resp.(*kmsg.IncrementalAlterConfigsResponse)
		for _, res := range r.Resources {
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
			out.Resources = append(out.Resources, rr)
		}
	case *kmsg.DescribeACLsRequest:
		resp.(*kmsg.DescribeACLsResponse).ErrorCode = code
	case *kmsg.CreateACLsRequest:
		out := resp.(*kmsg.CreateACLsResponse)
		for range r.Creations {
			res := kmsg.NewCreateACLsResponseResult()
			res.ErrorCode = code
			out.Results = append(out.Results, res)
		}
	case *kmsg.DeleteACLsRequest:
		out := resp.(*kmsg.DeleteACLsResponse)
		for range r.Filters {
			res := kmsg.NewDeleteACLsResponseResult()
			res.ErrorCode = code
			out.Results = append(out.Results, res)
		}
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		resp.(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode = code
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		out := resp.(*kmsg.AlterUserSCRAMCredentialsResponse)
		seen := map[string]bool{}
		add := func(user string) {
			if !seen[user] {
				seen[user] = true
				res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
				res.User, res.ErrorCode = user, code
				out.Results = append(out.Results, res)
			}
		}
		for _, d := range r.Deletions {
			add(d.Name)
		}
		for _, u := range r.Upsertions {
			add(u.Name)
		}
	case *kmsg.DescribeLogDirsRequest:
		resp.(*kmsg.DescribeLogDirsResponse).ErrorCode = code
	case *kmsg.AlterPartitionAssignmentsRequest:
		out := resp.(*kmsg.AlterPartitionAssignmentsResponse)
		out.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.ListPartitionReassignmentsRequest:
		resp.(*kmsg.ListPartitionReassignmentsResponse).ErrorCode = code
	case *kmsg.DescribeQuorumRequest:
		resp.(*kmsg.DescribeQuorumResponse).ErrorCode = code
	case *kmsg.DescribeClientQuotasRequest:
		resp.(*kmsg.DescribeClientQuotasResponse).ErrorCode = code
	case *kmsg.AlterClientQuotasRequest:
		out := resp.(*kmsg.AlterClientQuotasResponse)
		for _, e := range r.Entries {
			oe := kmsg.NewAlterClientQuotasResponseEntry()
			oe.ErrorCode = code
			for _, c := range e.Entity {
				ee := kmsg.NewAlterClientQuotasResponseEntryEntity()
				ee.Type, ee.Name = c.Type, c.Name
				oe.Entity = append(oe.Entity, ee)
			}
			out.Entries = append(out.Entries, oe)
		}
	case *kmsg.ElectLeadersRequest:
		// v0 has no top-level error: each partition carries it.
		out := resp.(*kmsg.ElectLeadersResponse)
		out.ErrorCode = code
		for _, t := range r.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.UpdateFeaturesRequest:
		out := resp.(*kmsg.UpdateFeaturesResponse)
		out.ErrorCode = code
		for _, u := range r.FeatureUpdates {
			res := kmsg.NewUpdateFeaturesResponseResult()
			res.Feature, res.ErrorCode = u.Feature, code
			out.Results = append(out.Results, res)
		}
	}
}

// appendErrors appends to resp an entry answering code for each partition
// req names, for the APIs whose requests are lists of topics' partitions
// and that authorization may refuse in part: a rule hands the handler the
// allowed part and answers the denied one with this. It reports whether
// req is one of those APIs.
func appendErrors(req kmsg.Request, resp kmsg.Response, code int16) bool {
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		out := resp.(*kmsg.ProduceResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, code, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.FetchRequest:
		out := resp.(*kmsg.FetchResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset = p.Partition, code, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.OffsetForLeaderEpochRequest:
		out := resp.(*kmsg.OffsetForLeaderEpochResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = p.Partition, code, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.OffsetCommitRequest:
		out := resp.(*kmsg.OffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.ListOffsetsRequest:
		out := resp.(*kmsg.ListOffsetsResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.DeleteRecordsRequest:
		out := resp.(*kmsg.DeleteRecordsResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewDeleteRecordsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDeleteRecordsResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.LowWatermark = p.Partition, code, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	case *kmsg.DescribeProducersRequest:
		out := resp.(*kmsg.DescribeProducersResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewDescribeProducersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewDescribeProducersResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
	default:
		return false
	}
	return true
}
