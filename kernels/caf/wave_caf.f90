! wave_caf.f90 - the 2D acoustic wave of the coarray paper in Coarray Fortran (OpenCoarrays).
!
! Purpose: the coarray side of the paper's comparison (K2 = T_blocking / T_coarray),
! computing exactly mpilab.halo.serial_wave on the process grid of wave_mpif.f90 (image
! i is MPI rank i - 1 at (cy, cx) = ((i - 1) / px, mod(i - 1, px)), blocks split as
! mpilab.halo.split), with no MPI call in the exchange.
! Algorithm, one step: every image writes the edges its neighbours need straight into
! their ghost cells, f(...)[img] = f(...) (one put per field and side: px and py to the
! W and N neighbours, then vx to the E and vy to the S neighbour), synchronises, and
! updates; the modes differ only in the synchronisation after each of the two puts:
!   coarray        - sync all (the paper's);
!   coarray-images - sync images(neighbours): only the up to four images it exchanges with;
!   coarray-packed - sync all, but a column (x = const, strided in memory) is copied into a
!                    contiguous buffer, put into a contiguous receive coarray of the
!                    neighbour, and copied into the ghost column there after the sync
!                    (an OpenCoarrays built without its STRIDED option, as Debian's, puts
!                    a strided section element by element).
! Two synchronisations per step make the puts race-free: an image writes a ghost only
! after the owner has passed the synchronisation that ends its reads of that ghost.
! The field is one coarray f(0:mc+1, 0:mr+1, 4)[*] sized for the largest block (every
! image must allocate the same shape); an image uses f(0:cols+1, 0:rows+1, :) of it.
!
! Parameters (key=value; see wave_common.f90): nx, ny, steps, mode, f0, courant, sx, sy,
! py, px, warmup, iters, reps, min_time, out, ftz, debug. Writes out.field (image 1, the
! gathered pressure) and out.times (image 1) when out is given. Steps are timed with
! MPI_Wtime (the clock of the C kernels) between two `sync all`, slowest image (co_max).
module wave_caf_run
  use wave_common
  implicit none
  private
  public :: main

  type(wave_args) :: a
  integer :: nimg, me, cy, cx, rows, cols, y0, x0, vxc, vyr, lsx, lsy
  integer :: west, east, north, south, cols_w, rows_n, nnb, nb(4)
  logical :: has_src, sync_all, packed
  integer(int64) :: nstep
  real(dp) :: dt
  real(dp), allocatable :: f(:, :, :)[:]
  ! coarray-packed: columns received (1 px E ghost, 2 py E ghost, 3 vx W ghost), and sent
  real(dp), allocatable :: cbuf(:, :)[:], sbuf(:)
  real(dp), allocatable :: times(:)
  real(dp) :: skew(SKEW_REPS)

contains

  subroutine main()
    character(len=:), allocatable :: msg
    integer :: k, mr, mc, d, around(4)

    nimg = num_images()
    me = this_image()
    call parse_args(a, msg)
    if (len(msg) == 0) call check_args(a, nimg, [character(len=16) :: 'coarray', &
                                                 'coarray-images', 'coarray-packed'], msg)
    if (len(msg) > 0) then  ! every image has the same arguments, so the same msg
      if (me == 1) then
        write (error_unit, '(a)') 'wave_caf: ' // msg
        flush (error_unit)
      end if
      sync all  ! no image's error stop ends the job before image 1 has said why
      error stop 2
    end if
    call set_ftz(a%ftz)
    sync_all = trim(a%mode) /= 'coarray-images'
    packed = trim(a%mode) == 'coarray-packed'

    cy = (me - 1) / a%dims(2)
    cx = mod(me - 1, a%dims(2))
    call split(a%ny, a%dims(1), cy, y0, rows)
    call split(a%nx, a%dims(2), cx, x0, cols)
    call split(a%ny, a%dims(1), 0, d, mr)     ! the first blocks are the largest
    call split(a%nx, a%dims(2), 0, d, mc)
    west = 0
    east = 0
    north = 0
    south = 0
    if (cx > 0) west = me - 1
    if (cx < a%dims(2) - 1) east = me + 1
    if (cy > 0) north = me - a%dims(2)
    if (cy < a%dims(1) - 1) south = me + a%dims(2)
    cols_w = 0
    rows_n = 0
    if (west > 0) call split(a%nx, a%dims(2), cx - 1, d, cols_w)
    if (north > 0) call split(a%ny, a%dims(1), cy - 1, d, rows_n)
    nnb = 0
    around = [west, east, north, south]
    do k = 1, 4
      if (around(k) > 0) then
        nnb = nnb + 1
        nb(nnb) = around(k)
      end if
    end do
    allocate (f(0:mc + 1, 0:mr + 1, 4)[*])
    f = 0
    allocate (cbuf(mr, 3)[*], sbuf(mr))
    cbuf = 0
    dt = a%courant
    vxc = cols
    if (x0 + cols == a%nx) vxc = cols - 1
    vyr = rows
    if (y0 + rows == a%ny) vyr = rows - 1
    lsx = a%sx - x0 + 1
    lsy = a%sy - y0 + 1
    has_src = lsx >= 1 .and. lsx <= cols .and. lsy >= 1 .and. lsy <= rows
    nstep = 0
    sync all

    do k = 1, a%steps
      call step()
    end do
    if (len(a%out) > 0) call gather_and_write(a%out // '.field')
    if (a%reps > 0) then
      allocate (times(a%reps))
      call time_steps(step, barrier, maxall, a, times, skew)
      if (me == 1 .and. len(a%out) > 0) call write_times(a%out // '.times', a, nimg, times, &
                                                         skew)
    end if
    sync all
  end subroutine main

  subroutine step()
    real(dp) :: src

    if (nstep == 0 .and. len_trim(a%debug) > 0 .and. me == nimg) call misbehave()
    ! pressure edges into the W neighbour's E ghost and the N neighbour's S ghost
    if (west > 0 .and. packed) then
      sbuf(1:rows) = f(1, 1:rows, 1)
      cbuf(1:rows, 1)[west] = sbuf(1:rows)
      sbuf(1:rows) = f(1, 1:rows, 2)
      cbuf(1:rows, 2)[west] = sbuf(1:rows)
    else if (west > 0) then
      f(cols_w + 1, 1:rows, 1)[west] = f(1, 1:rows, 1)
      f(cols_w + 1, 1:rows, 2)[west] = f(1, 1:rows, 2)
    end if
    if (north > 0) then
      f(1:cols, rows_n + 1, 1)[north] = f(1:cols, 1, 1)
      f(1:cols, rows_n + 1, 2)[north] = f(1:cols, 1, 2)
    end if
    call sync_neighbours()
    if (east > 0 .and. packed) then
      f(cols + 1, 1:rows, 1) = cbuf(1:rows, 1)
      f(cols + 1, 1:rows, 2) = cbuf(1:rows, 2)
    end if
    call vx_cols(f(:, :, 1), f(:, :, 2), f(:, :, 3), dt, 1, vxc, rows)
    call vy_rows(f(:, :, 1), f(:, :, 2), f(:, :, 4), dt, 1, vyr, cols)
    ! velocity edges into the E neighbour's W ghost (vx) and the S neighbour's N ghost (vy)
    if (east > 0 .and. packed) then
      sbuf(1:rows) = f(cols, 1:rows, 3)
      cbuf(1:rows, 3)[east] = sbuf(1:rows)
    else if (east > 0) then
      f(0, 1:rows, 3)[east] = f(cols, 1:rows, 3)
    end if
    if (south > 0) f(1:cols, 0, 4)[south] = f(1:cols, rows, 4)
    call sync_neighbours()
    if (west > 0 .and. packed) f(0, 1:rows, 3) = cbuf(1:rows, 3)
    call px_cols(f(:, :, 3), f(:, :, 1), dt, 1, cols, rows)
    call py_rows(f(:, :, 4), f(:, :, 2), dt, 1, rows, cols)
    if (has_src) then
      src = (0.5_dp * dt) * ricker((real(nstep, dp) + 0.5_dp) * dt, a%f0)
      f(lsx, lsy, 1) = f(lsx, lsy, 1) + src
      f(lsx, lsy, 2) = f(lsx, lsy, 2) + src
    end if
    nstep = nstep + 1
  end subroutine step

  subroutine sync_neighbours()
    if (sync_all) then
      sync all
    else if (nnb > 0) then
      sync images (nb(1:nnb))
    end if
  end subroutine sync_neighbours

  ! p = px + py of every block, fetched by image 1 and written there.
  subroutine gather_and_write(path)
    character(len=*), intent(in) :: path
    real(dp), allocatable :: p(:, :)
    integer :: i, by0, bx0, br, bc

    sync all
    if (me == 1) then
      allocate (p(a%nx, a%ny))
      do i = 1, nimg
        call split(a%ny, a%dims(1), (i - 1) / a%dims(2), by0, br)
        call split(a%nx, a%dims(2), mod(i - 1, a%dims(2)), bx0, bc)
        p(bx0 + 1:bx0 + bc, by0 + 1:by0 + br) = f(1:bc, 1:br, 1)[i] + f(1:bc, 1:br, 2)[i]
      end do
      call write_field(path, p)
    end if
    sync all
  end subroutine gather_and_write

  subroutine barrier()
    sync all
  end subroutine barrier

  subroutine maxall(t)
    real(dp), intent(inout) :: t
    call co_max(t)
  end subroutine maxall

  subroutine misbehave()
    if (trim(a%debug) == 'crash') then
      write (error_unit, '(a)') 'wave_caf: crashing on purpose (debug=crash)'
      error stop 3
    else if (trim(a%debug) == 'hang') then
      do
        call sleep(1)
      end do
    end if
  end subroutine misbehave

end module wave_caf_run

program wave_caf
  use wave_caf_run, only: main
  call main()
end program wave_caf
