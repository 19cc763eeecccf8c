//! Devices: `ibv_get_device_list` and the device's names and GUID.
//!
//! A device is a network interface with addresses (`roce_<ifname>`, as
//! `roce_verbs::Device::list` names them), loopback included. The
//! `ibv_device` objects live for the whole process: a program may keep a
//! device pointer after `ibv_free_device_list` while a context of it is
//! open, and rdma-core's own objects outlive the list the same way, so
//! each device is allocated once, the first time a list names it, and
//! reused by every later list.

use std::os::raw::{c_char, c_int};
use std::sync::Mutex;

use crate::abi::consts::{IBV_NODE_CA, IBV_TRANSPORT_IB};
use crate::abi::{_ibv_device_ops, ibv_device};
use crate::config;
use crate::ffi::{copy_cstr, ptr_ret};
use crate::ffi::{value_or, void};

/// One device: the C view first (programs hold a pointer to it).
#[repr(C)]
pub(crate) struct Device {
    pub(crate) ibv: ibv_device,
    /// The interface, as listed when the device was first seen.
    pub(crate) info: roce_verbs::Device,
    /// Node GUID, in network byte order as `ibv_get_device_guid` returns.
    pub(crate) guid_be: u64,
    /// The device's NUL-terminated name, as `ibv_get_device_name` returns.
    name: std::ffi::CString,
}

/// Every device seen by this process (see the module docs).
static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());

fn lookup(info: roce_verbs::Device) -> &'static Device {
    let mut all = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    let name = info.name();
    if let Some(d) = all.iter().find(|d| d.info.name() == name) {
        return d;
    }
    let mut ibv = ibv_device {
        _ops: _ibv_device_ops {
            _dummy1: None,
            _dummy2: None,
        },
        node_type: IBV_NODE_CA,
        transport_type: IBV_TRANSPORT_IB,
        name: [0; 64],
        dev_name: [0; 64],
        dev_path: [0; 256],
        ibdev_path: [0; 256],
    };
    copy_cstr(&mut ibv.name, &name);
    copy_cstr(&mut ibv.dev_name, &format!("uverbs_{name}"));
    copy_cstr(
        &mut ibv.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs_{name}"),
    );
    copy_cstr(
        &mut ibv.ibdev_path,
        &format!("/sys/class/infiniband/{name}"),
    );
    let d: &'static Device = Box::leak(Box::new(Device {
        ibv,
        guid_be: info.node_guid().to_be(),
        name: std::ffi::CString::new(name).unwrap_or_default(),
        info,
    }));
    all.push(d);
    d
}

/// The devices a list shows now: every interface with an address, or
/// those `ROCE_DEVICES` names.
pub(crate) fn current() -> Result<Vec<&'static Device>, c_int> {
    let found = roce_verbs::Device::list().map_err(|_| libc::EIO)?;
    let only = config::devices();
    Ok(found
        .into_iter()
        .filter(|d| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|n| d.name() == *n || d.interface().name == *n))
        })
        .map(lookup)
        .collect())
}

/// The device behind a program's pointer: only pointers this library
/// handed out are accepted.
pub(crate) fn from_ptr(p: *mut ibv_device) -> Result<&'static Device, c_int> {
    let all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    all.iter()
        .find(|d| std::ptr::eq(&d.ibv, p))
        .copied()
        .ok_or(libc::EINVAL)
}

export! {
    /// `ibv_get_device_list`: a NULL-terminated array (freed by
    /// `ibv_free_device_list`), its length in `*num` when `num` is given.
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
        ptr_ret(|| {
            let devs = current()?;
            // SAFETY: calloc of devs.len() + 1 pointers; checked below.
            let arr = unsafe { libc::calloc(devs.len() + 1, size_of::<*mut ibv_device>()) }
                as *mut *mut ibv_device;
            if arr.is_null() {
                return Err(libc::ENOMEM);
            }
            for (i, d) in devs.iter().enumerate() {
                // SAFETY: i < devs.len(), inside the allocation; the last
                // slot stays NULL (calloc).
                unsafe { *arr.add(i) = &d.ibv as *const ibv_device as *mut ibv_device };
            }
            if !num.is_null() {
                // SAFETY: the program passes a valid int pointer or NULL.
                unsafe { *num = devs.len() as c_int };
            }
            Ok(arr)
        })
    }
}

export! {
    /// `ibv_free_device_list`: frees the array (the devices stay).
    fn ibv_free_device_list(list: *mut *mut ibv_device) {
        // SAFETY: `list` came from ibv_get_device_list's calloc (or is NULL).
        void(|| {
            unsafe { libc::free(list.cast()) };
            Ok(())
        })
    }
}

export! {
    /// `ibv_get_device_name`.
    fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
        ptr_ret(|| from_ptr(dev).map(|d| d.name.as_ptr()))
    }
}

export! {
    /// `ibv_get_device_guid`: the node GUID, network byte order.
    fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
        value_or(0, || from_ptr(dev).map_or(0, |d| d.guid_be))
    }
}

export! {
    /// `ibv_get_device_index`: the interface index (-1 if unknown).
    fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
        value_or(-1, || from_ptr(dev).map_or(-1, |d| d.info.interface().index as c_int))
    }
}
