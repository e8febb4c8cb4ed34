// The longest vhost name any module keeps: RabbitMQ limits vhost names to 255 bytes (AMQP 0-9-1
// short strings), so a longer one is refused before it reaches a broker.
#pragma once

#include <cstddef>

namespace sluice {

inline constexpr size_t kVhostBytesMax = 255;

}  // namespace sluice
