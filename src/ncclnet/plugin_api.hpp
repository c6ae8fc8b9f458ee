// NCCL's network-plugin interface, the parts this plugin exports: the tables NCCL looks up by
// name in a plugin library (dlsym "ncclNetPlugin_v11", "ncclCollNetPlugin_v11", ..., newest
// first), written here from NCCL's documented plugin API (ext-net). Field order and types are the
// ABI: they follow the documentation exactly. nccl.h gives the result, data type and reduction
// enums; NCCL installs no header for the plugin tables themselves.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace inagg::ncclnet {

constexpr size_t kHandleBytes = 128;                             // NCCL_NET_HANDLE_MAXSIZE: what listen() may write
constexpr int kPtrHost = 0x1, kPtrCuda = 0x2, kPtrDmaBuf = 0x4;  // NCCL_PTR_*
constexpr int kMaxDevsPerNic = 4;                                // NCCL_NET_MAX_DEVS_PER_NIC

// ncclDebugLogLevel and the subsystems of NCCL's logger (NCCL_INIT, NCCL_NET).
enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };
constexpr unsigned long kLogInit = 0x1, kLogNet = 0x10;
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);
using ProfilerCallback = ncclResult_t (*)(void** event, int type, void* parent, int64_t plugin_id, void* data);

struct VDeviceProps {
  int ndevs;
  int devs[kMaxDevsPerNic];
};

// ncclNetProperties_v9_t and _v10_t (the same fields); v11 adds the last one.
struct PropertiesV10 {
  char* name;
  char* pci_path;
  uint64_t guid;
  int ptr_support;  // kPtr* bits
  int reg_is_global;
  int force_flush;
  int speed;  // Mbit/s
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int net_device_type;  // 0: host (no device offload)
  int net_device_version;
  VDeviceProps vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
};
struct PropertiesV11 : PropertiesV10 {
  int max_multi_request_size;
};

// One piece of a scatter-gather list (ncclNetSGE_v9/10/11_t).
struct Sge {
  void* mhandle;
  void* address;
  size_t size;
};

// ncclCollNet_v11_t.
struct CollNetV11 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t comm_id, Logger log);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*get_properties)(int dev, PropertiesV11* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listen_comm);
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm);
  ncclResult_t (*reduce_support)(ncclDataType_t type, ncclRedOp_t op, int* supported);
  ncclResult_t (*reg_mr)(void* coll_comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*reg_mr_dma_buf)(void* coll_comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 void** mhandle);
  ncclResult_t (*dereg_mr)(void* coll_comm, void* mhandle);
  ncclResult_t (*iallreduce)(void* coll_comm, void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                             void* send_mhandle, void* recv_mhandle, void** request);
  ncclResult_t (*iallgather)(void* coll_comm, void* send, int nrecv_parts, Sge* recv_parts, size_t bytes_per_rank,
                             size_t window_offset, size_t window_bytes, void* send_mhandle, void** request);
  ncclResult_t (*ireducescatter)(void* coll_comm, int nsend_parts, Sge* send_parts, void* recv, size_t bytes_per_rank,
                                 size_t window_offset, size_t window_bytes, ncclDataType_t type, ncclRedOp_t op,
                                 void* recv_mhandle, void** request);
  ncclResult_t (*iflush)(void* coll_comm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*close_coll)(void* coll_comm);
  ncclResult_t (*close_listen)(void* listen_comm);
  ncclResult_t (*make_vdevice)(int* d, VDeviceProps* props);
  ncclResult_t (*finalize)(void* ctx);
};

// ncclCollNet_v10_t and _v9_t (the same fields; their properties are PropertiesV10): no context,
// no finalize.
struct CollNetV10 {
  const char* name;
  ncclResult_t (*init)(Logger log);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*get_properties)(int dev, PropertiesV10* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listen_comm);
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm);
  ncclResult_t (*reduce_support)(ncclDataType_t type, ncclRedOp_t op, int* supported);
  ncclResult_t (*reg_mr)(void* coll_comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*reg_mr_dma_buf)(void* coll_comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 void** mhandle);
  ncclResult_t (*dereg_mr)(void* coll_comm, void* mhandle);
  ncclResult_t (*iallreduce)(void* coll_comm, void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                             void* send_mhandle, void* recv_mhandle, void** request);
  ncclResult_t (*iallgather)(void* coll_comm, void* send, int nrecv_parts, Sge* recv_parts, size_t bytes_per_rank,
                             size_t window_offset, size_t window_bytes, void* send_mhandle, void** request);
  ncclResult_t (*ireducescatter)(void* coll_comm, int nsend_parts, Sge* send_parts, void* recv, size_t bytes_per_rank,
                                 size_t window_offset, size_t window_bytes, ncclDataType_t type, ncclRedOp_t op,
                                 void* recv_mhandle, void** request);
  ncclResult_t (*iflush)(void* coll_comm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*close_coll)(void* coll_comm);
  ncclResult_t (*close_listen)(void* listen_comm);
  ncclResult_t (*make_vdevice)(int* d, VDeviceProps* props);
};

// ncclNetCommConfig_v11_t and ncclNetAttr_v11_t (passed through, not read).
struct NetCommConfig {
  int traffic_class;
};
struct NetAttr;
struct NetDeviceHandle;

// ncclNet_v11_t: the point-to-point network.
struct NetV11 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t comm_id, NetCommConfig* config, Logger log, ProfilerCallback prof);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*get_properties)(int dev, PropertiesV11* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listen_comm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** send_comm, NetDeviceHandle** send_dev_comm);
  ncclResult_t (*accept)(void* listen_comm, void** recv_comm, NetDeviceHandle** recv_dev_comm);
  ncclResult_t (*reg_mr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*reg_mr_dma_buf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 void** mhandle);
  ncclResult_t (*dereg_mr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                        void** request);
  ncclResult_t (*irecv)(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*close_send)(void* send_comm);
  ncclResult_t (*close_recv)(void* recv_comm);
  ncclResult_t (*close_listen)(void* listen_comm);
  ncclResult_t (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecv_consumed)(void* recv_comm, int n, void* request);
  ncclResult_t (*make_vdevice)(int* d, VDeviceProps* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*set_net_attr)(void* ctx, NetAttr* attr);
};

}  // namespace inagg::ncclnet
