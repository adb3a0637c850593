// A Gloo rendezvous Store backed by our store client (runtime/store/store_client.h), so
// Gloo's full-mesh connect goes through the job's own store, under a per-attempt prefix.
// Failures throw gloo::IoException carrying our error text (the shim catches it).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

extern "C" {
#include "store_client.h"
}

class DsGlooStore : public gloo::rendezvous::Store {
 public:
  DsGlooStore(ds_store_client* client, std::string prefix, int timeout_ms)
      : client_(client), prefix_(std::move(prefix)), timeout_ms_(timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  ds_store_client* client_;
  std::string prefix_;
  int timeout_ms_;
};
