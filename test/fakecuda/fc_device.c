/*
 * fakecuda device queries: count, ordinals, name, UUID, PCI bus id and
 * attributes of the simulated GPUs. Each one presents itself as an NVIDIA
 * H100 SXM5 80GB; the attribute figures live in fc_device_attributes.c.
 */
#include "fc_internal.h"

#include <stdio.h>
#include <string.h>

CUresult fc_check_device(CUdevice dev)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || (uint32_t)dev >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetCount(int *count)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = (int)fc_shared_state()->ndevices;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || (uint32_t)ordinal >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", FC_DEVICE_NAME);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, fc_shared_state()->dev[dev].uuid, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

FC_API CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!bus_id || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus_id, (size_t)len, "00000000:%02X:00.0", FC_PCI_BUS_BASE + dev);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value || !fc_device_attribute(attrib, dev, value))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
