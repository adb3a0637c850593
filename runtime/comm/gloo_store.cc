#include "gloo_store.hh"

#include <cstdlib>

#include <gloo/common/error.h>

void DsGlooStore::set(const std::string& key, const std::vector<char>& data) {
  ds_err err;
  std::string k = prefix_ + key;
  if (ds_store_set(client_, k.c_str(), data.data(), data.size(), &err) != 0)
    throw gloo::IoException(err.msg);
}

std::vector<char> DsGlooStore::get(const std::string& key) {
  ds_err err;
  std::string k = prefix_ + key;
  void* val = nullptr;
  size_t len = 0;
  if (ds_store_get(client_, k.c_str(), &val, &len, timeout_ms_, &err) != 0)
    throw gloo::IoException(err.msg);
  const char* p = static_cast<const char*>(val);
  std::vector<char> out(p, p + len);
  free(val);
  return out;
}

void DsGlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(timeout_ms_));
}

void DsGlooStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  std::vector<const char*> ptrs;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  for (const auto& k : full) ptrs.push_back(k.c_str());
  // Gloo passes its context's timeout, which is ours; the smaller one wins anyway.
  long ms = timeout.count();
  if (ms <= 0 || ms > timeout_ms_) ms = timeout_ms_;
  ds_err err;
  if (ds_store_wait(client_, ptrs.data(), (int)ptrs.size(), (int)ms, &err) != 0) {
    // connectFullMesh waits on keys named by rank: say who is missing in those words.
    std::string who;
    for (const auto& k : keys) who += (who.empty() ? "" : ", ") + k;
    throw gloo::IoException("rank " + who + " arrived but never published its address: " +
                            err.msg);
  }
}
