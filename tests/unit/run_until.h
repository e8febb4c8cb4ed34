// Test helper: runs an io_context until a condition holds or a generous deadline passes, for
// tests of asynchronous control code (probes, feeds). No timing is asserted with it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>

namespace sluice::control::test_support {

// Returns cond() at the end: false only when the deadline passed first.
template <class Cond>
bool run_until(boost::asio::io_context& io, Cond cond,
               std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond() && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(std::chrono::milliseconds(50));
    if (io.stopped()) io.restart();
  }
  return cond();
}

}  // namespace sluice::control::test_support
