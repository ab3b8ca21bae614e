// Included first by every translation unit of the HTTP module that includes Asio
// (http_server.cpp, http_connection.cpp, http_exchange.cpp, http_routing.cpp; http_connection.h
// includes Asio), so they all agree on Asio's configuration.
//
// ThreadSanitizer does not model std::atomic_thread_fence (-Wtsan warns at every Asio
// handler); Asio's queues are mutex-guarded, so its fences add nothing TSan needs.
#pragma once

#if defined(__SANITIZE_THREAD__) && !defined(BOOST_ASIO_DISABLE_FENCED_BLOCK)
#define BOOST_ASIO_DISABLE_FENCED_BLOCK 1
#endif
