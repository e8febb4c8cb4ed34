// The lcore's flow table, prelude slots and local ports for owner legs; lingering flows give
// way, oldest first, when the table or the ports run out.
#include <algorithm>

#include "base/assert.h"
#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/engine/slot.h"

namespace sluice::dpdk::engine {

using detail::FlowState;
using detail::kNoSlot;

Lcore::Flow* Lcore::alloc_flow() {
  if (free_slots_.empty()) return nullptr;
  // A full table: the flow that has lingered longest gives way, as a host short of room for
  // another TIME_WAIT drops one. Only live flows refuse a new one.
  uint32_t bit;
  if (free_head_ == kNoSlot && !evict_lingering(&bit)) return nullptr;
  Flow& fl = flows_[free_head_];
  free_head_ = fl.next_free;
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  fl = Flow{};
  fl.slot = slot;
  ++flows_in_use_;
  ++slots_in_use_;
  return &fl;
}

uint32_t Lcore::index_of(const Flow& fl) const {
  return uint32_t(&fl - flows_.data());
}

void Lcore::free_flow(Flow& fl) {
  SLUICE_ASSERT(fl.state != FlowState::kFree);
  const uint32_t id = index_of(fl);
  if (fast_key_.flow == id) fast_key_ = FastKey{};
  tuples_.erase(fl.client.rx);
  free_local_port(fl);
  if (fl.state == FlowState::kLinger) {
    --lingering_;
    if (fl.linger_prev != kNoSlot) {
      flows_[fl.linger_prev].linger_next = fl.linger_next;
    } else {
      linger_head_ = fl.linger_next;
    }
    if (fl.linger_next != kNoSlot) {
      flows_[fl.linger_next].linger_prev = fl.linger_prev;
    } else {
      linger_tail_ = fl.linger_prev;
    }
  }
  if (fl.slot != kNoSlot) {
    release_parked(fl, false);
    slots_[fl.slot]->reset();
    free_slots_.push_back(fl.slot);
    --slots_in_use_;
  }
  timers_.cancel(id);
  fl = Flow{};
  fl.next_free = free_head_;
  free_head_ = id;
  --flows_in_use_;
  ++counters_.flows_freed;
}

namespace {

bool is_session(const detail::Flow& fl) {
  return fl.state != FlowState::kFree && fl.state != FlowState::kLinger;
}

}  // namespace

bool Lcore::list_flows(FlowListing& listing, uint32_t count) const {
  const uint32_t end = uint32_t(std::min<size_t>(flows_.size(), size_t(listing.next) + count));
  for (uint32_t i = listing.next; i < end; ++i) {
    if (is_session(flows_[i])) listing.found.emplace_back(flows_[i].id, i);
  }
  listing.next = end;
  return end == flows_.size();
}

std::vector<Lcore::FlowView> Lcore::flow_views(FlowListing& listing, size_t limit) const {
  // Ids grow with creation: the smallest are the oldest. A flow found in an earlier step may
  // have ended since, and its entry may hold a newer one: the id tells.
  std::vector<std::pair<uint64_t, uint32_t>>& found = listing.found;
  std::erase_if(found, [&](const std::pair<uint64_t, uint32_t>& f) {
    const Flow& fl = flows_[f.second];
    return !is_session(fl) || fl.id != f.first;
  });
  const size_t n = std::min(limit, found.size());
  std::partial_sort(found.begin(), found.begin() + long(n), found.end());
  std::vector<FlowView> out;
  out.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const Flow& fl = flows_[found[k].second];
    FlowView v;
    v.id = fl.id;
    v.client = fl.client.rx;
    v.state = fl.to_spill && fl.state == FlowState::kSpliced ? "spill"
                                                             : detail::flow_state_name(fl.state);
    v.node = fl.node;
    v.to_spill = fl.to_spill;
    const detail::FlowDestination& destination = destinations_[found[k].second];
    if (destination.flow_id == fl.id) {
      v.vhost = destination.vhost;
      v.queue = destination.queue;
    }
    v.bytes_in = fl.spliced_bytes[1];
    v.bytes_out = fl.spliced_bytes[0];
    v.age_ms = now_ms_ - std::min(now_ms_, fl.created_ms);
    out.push_back(std::move(v));
  }
  return out;
}

detail::FlowState Lcore::flow_state(const flow::Tuple& client) const {
  const uint32_t id = tuples_.find(client);
  return id == flow::TupleMap::kNone ? FlowState::kFree : flows_[id].state;
}

uint32_t Lcore::local_port_bit(const Flow& fl) const {
  const size_t ip_index =
      size_t(std::find(config_.local_ips.begin(), config_.local_ips.end(), fl.local_ip) -
             config_.local_ips.begin());
  return uint32_t(ip_index * (size_t(config_.local_port_max) - config_.local_port_min + 1) +
                  (fl.local_port - config_.local_port_min));
}

void Lcore::free_local_port(Flow& fl) {
  if (fl.local_port == 0) return;
  tuples_.erase(fl.owner.rx);
  const uint32_t bit = local_port_bit(fl);
  ports_in_use_[bit / 64] &= ~(uint64_t(1) << (bit % 64));
  fl.local_port = 0;
}

bool Lcore::evict_lingering(uint32_t* bit) {
  if (linger_head_ == kNoSlot) return false;
  Flow& old = flows_[linger_head_];
  *bit = old.local_port != 0 ? local_port_bit(old) : UINT32_MAX;
  ++counters_.lingering_evicted;
  free_flow(old);
  return true;
}

bool Lcore::take_local_port(Flow& fl, uint32_t bit) {
  uint64_t& word = ports_in_use_[bit / 64];
  if (word & (uint64_t(1) << (bit % 64))) return false;
  const uint32_t per_ip = uint32_t(config_.local_port_max) - config_.local_port_min + 1;
  const uint32_t ip = config_.local_ips[bit / per_ip];
  const uint16_t port = uint16_t(config_.local_port_min + bit % per_ip);
  const flow::Tuple owner_rx{fl.owner.rx.src_ip, ip, fl.owner.rx.src_port, port};
  if (!tuples_.insert(owner_rx, index_of(fl))) return false;
  word |= uint64_t(1) << (bit % 64);
  fl.local_ip = ip;
  fl.local_port = port;
  fl.owner.rx = owner_rx;
  return true;
}

bool Lcore::alloc_local_port(Flow& fl) {
  const uint32_t per_ip = uint32_t(config_.local_port_max) - config_.local_port_min + 1;
  const uint32_t pairs = uint32_t(config_.local_ips.size()) * per_ip;
  for (uint32_t n = 0; n < pairs; ++n) {
    const uint32_t bit = port_cursor_;
    port_cursor_ = (port_cursor_ + 1) % pairs;
    if (take_local_port(fl, bit)) return true;
  }
  // Every pair is taken: those of flows that ended come back, longest lingering first.
  uint32_t bit;
  while (evict_lingering(&bit)) {
    if (bit != UINT32_MAX && take_local_port(fl, bit)) return true;
  }
  ++counters_.local_ports_exhausted;
  return false;
}

}  // namespace sluice::dpdk::engine
