// The io_uring engine's SpillSink over a worker's producer of the spill log (the engine
// includes neither control/ nor queue/; its Router is control's ReplicaRouter).
#pragma once

#include <span>
#include <string_view>

#include "dataplane/uring/engine.h"
#include "queue/spill_producer.h"

namespace sluice::gateway {

class ProducerSink : public uring::SpillSink {
 public:
  // The worker calls arm_notify() before it blocks whenever appends are in flight, which
  // publishes them: the producer's wake-ups are batched per pass of the worker's loop.
  explicit ProducerSink(queue::SpillProducer& producer) : producer_(producer) {
    producer_.set_batched_wake(true);
  }
  Result append(uint64_t token, std::string_view vhost, std::string_view queue,
                std::string_view headers, std::string_view body, std::string_view* why) override;
  size_t poll(std::span<Done> out) override;
  uint64_t in_flight() const override { return producer_.in_flight(); }
  bool arm_notify() override { return producer_.arm_notify(); }
  int notify_fd() const override { return producer_.notify_fd(); }

 private:
  queue::SpillProducer& producer_;
};

}  // namespace sluice::gateway
