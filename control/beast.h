// Boost.Beast for control's HTTP (the admin API's server and client, the RabbitMQ feed), included
// through this header only. GCC 12 with sanitizers reports a false -Wmaybe-uninitialized inside
// Beast's parser (a boost::optional it fills before reading): Boost's code, not ours, and
// -Werror would stop the ASan build. The diagnostic is silenced for these headers alone.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
