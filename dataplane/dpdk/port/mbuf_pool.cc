// MbufPool: creation of the mempool and the Frame set up in each mbuf's private area.
#include "dataplane/dpdk/port/mbuf_pool.h"

#include <rte_errno.h>
#include <rte_mempool.h>

namespace sluice::dpdk::port {
namespace {

// Runs once per mbuf at creation so that frame_of/mbuf_of round-trip for every mbuf of the
// pool, even one the engine never converted.
void init_frame(rte_mempool*, void*, void* obj, unsigned) {
  auto* m = static_cast<rte_mbuf*>(obj);
  engine::Frame* f = MbufPool::frame_of(m);
  *f = engine::Frame{};
  f->handle = m;
}

}  // namespace

Result<std::unique_ptr<MbufPool>> MbufPool::create(const MbufPoolConfig& config) {
  if (config.name.empty()) return failure("mbuf pool: empty name");
  if (config.cache_size > RTE_MEMPOOL_CACHE_MAX_SIZE) {
    return failure("mbuf pool '" + config.name + "': cache_size " +
                   std::to_string(config.cache_size) + " is over the limit of " +
                   std::to_string(RTE_MEMPOOL_CACHE_MAX_SIZE));
  }
  if (config.data_room <= RTE_PKTMBUF_HEADROOM) {
    return failure("mbuf pool '" + config.name + "': data_room " +
                   std::to_string(config.data_room) + " leaves no room after the " +
                   std::to_string(RTE_PKTMBUF_HEADROOM) + "-byte headroom");
  }
  rte_mempool* mp = rte_pktmbuf_pool_create(config.name.c_str(), config.count, config.cache_size,
                                            kPrivBytes, config.data_room, config.socket);
  if (mp == nullptr) {
    return failure("mbuf pool '" + config.name + "' (" + std::to_string(config.count) +
                   " mbufs of " + std::to_string(config.data_room) +
                   " bytes): " + rte_strerror(rte_errno));
  }
  rte_mempool_obj_iter(mp, init_frame, nullptr);
  return std::unique_ptr<MbufPool>(new MbufPool(mp));
}

MbufPool::~MbufPool() {
  rte_mempool_free(pool_);
}

engine::Frame* MbufPool::alloc() {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return nullptr;
  engine::Frame* f = frame_of(m);
  f->data = rte_pktmbuf_mtod(m, uint8_t*);
  f->len = 0;
  f->room = rte_pktmbuf_tailroom(m);
  f->port = 0;
  f->handle = m;
  return f;
}

void MbufPool::free(engine::Frame* f) {
  rte_pktmbuf_free(mbuf_of(f));
}

uint32_t MbufPool::available() const {
  return rte_mempool_avail_count(pool_);
}

}  // namespace sluice::dpdk::port
