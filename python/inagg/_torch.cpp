// inagg's torch.distributed backend for Python (_torch): the process group of src/torchdist/ as a
// subclass of torch.distributed.ProcessGroup, which python/inagg/torch.py registers as backend
// "inagg". Built against Debian's libtorch-dev with the pybind11 ABI of python3-torch, so that
// torch's own types (Store, ProcessGroup) cross between the two modules.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "inagg/torchdist/process_group.hpp"

namespace py = pybind11;
using inagg::torchdist::ProcessGroupInagg;
using inagg::torchdist::ProcessGroupOptions;

PYBIND11_MODULE(_torch, m) {
  m.doc() = "inagg's torch.distributed process group (see inagg.torch)";
  py::class_<ProcessGroupOptions>(m, "_Options")
      .def(py::init<>())
      .def_readwrite("control", &ProcessGroupOptions::control)
      .def_readwrite("control_secret_file", &ProcessGroupOptions::control_secret_file)
      .def_readwrite("exchange_secret_file", &ProcessGroupOptions::exchange_secret_file)
      .def_readwrite("store_prefix", &ProcessGroupOptions::store_prefix)
      .def_readwrite("job_id", &ProcessGroupOptions::job_id)
      .def_readwrite("dtype", &ProcessGroupOptions::dtype)
      .def_readwrite("address", &ProcessGroupOptions::address)
      .def_readwrite("interface", &ProcessGroupOptions::interface)
      .def_readwrite("master_addr", &ProcessGroupOptions::master_addr)
      .def_readwrite("message", &ProcessGroupOptions::message)
      .def_readwrite("payload", &ProcessGroupOptions::payload)
      .def_readwrite("window", &ProcessGroupOptions::window)
      .def_readwrite("channels", &ProcessGroupOptions::channels)
      .def_readwrite("ack_timeout_ms", &ProcessGroupOptions::ack_timeout_ms)
      .def_readwrite("retry", &ProcessGroupOptions::retry)
      .def_readwrite("chunk_bytes", &ProcessGroupOptions::chunk_bytes)
      .def_readwrite("timeout_s", &ProcessGroupOptions::timeout_s)
      .def_readwrite("debug", &ProcessGroupOptions::debug)
      .def_readwrite("gloo_only", &ProcessGroupOptions::gloo_only);

  m.attr("COUNTERS") = [] {
    py::dict d;
#define X(name, text) d[#name] = text;
    INAGG_PG_COUNTERS(X)
#undef X
    return d;
  }();

  const py::object base = py::module::import("torch.distributed").attr("ProcessGroup");
  py::class_<ProcessGroupInagg, c10::intrusive_ptr<ProcessGroupInagg>>(m, "ProcessGroupInagg", base)
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       const c10::intrusive_ptr<c10d::ProcessGroup>& gloo, const ProcessGroupOptions& options,
                       std::chrono::milliseconds timeout) {
             py::gil_scoped_release nogil;
             return c10::make_intrusive<ProcessGroupInagg>(store, rank, size, gloo, options, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("gloo"), py::arg("options"), py::arg("timeout"))
      .def("counters", &ProcessGroupInagg::counters, py::call_guard<py::gil_scoped_release>(),
           "Which way the calls went (COUNTERS says what each means) and the transport's counters")
      .def("job_stats", &ProcessGroupInagg::job_stats, py::call_guard<py::gil_scoped_release>(),
           py::arg("collective") = "allreduce",
           "The appliance's `stats ID` reply for this group's job of that collective (allreduce, reduce_scatter, "
           "all_gather)")
      .def("shutdown", &ProcessGroupInagg::shutdown, py::call_guard<py::gil_scoped_release>(),
           "Ends the group: the queue drained, the transport quiet, the job removed by rank 0")
      .def_property_readonly("job_id", &ProcessGroupInagg::job_id)
      .def_property_readonly("rs_job_id", &ProcessGroupInagg::rs_job_id)
      .def_property_readonly("ag_job_id", &ProcessGroupInagg::ag_job_id)
      .def_property_readonly("uses_appliance", &ProcessGroupInagg::uses_appliance)
      .def_property_readonly("gloo_only", &ProcessGroupInagg::gloo_only)
      .def_property_readonly("address", &ProcessGroupInagg::address)
      .def_property_readonly("job_text", &ProcessGroupInagg::job_text)
      .def_property_readonly("payload", &ProcessGroupInagg::payload);
}
