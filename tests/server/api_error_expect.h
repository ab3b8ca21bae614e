// EXPECT_API_ERROR for the protocol parsers' tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "server/openai_protocol.h"

// Expects a 400 whose param is `param` and whose message contains `needle`.
#define EXPECT_API_ERROR(stmt, param_, needle)                                              \
  do {                                                                                      \
    try {                                                                                   \
      stmt;                                                                                 \
      ADD_FAILURE() << "no ApiError from " #stmt;                                           \
    } catch (const ApiError& e) {                                                           \
      EXPECT_EQ(e.status, 400) << e.what();                                                 \
      EXPECT_EQ(e.param, std::string(param_)) << e.what();                                  \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)                      \
          << "message: " << e.what() << "\nwanted: " << needle;                             \
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line message"; \
    }                                                                                       \
  } while (0)
